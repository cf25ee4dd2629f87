"""``magnetar produce`` and ``magnetar consume``, as ``pulsar-client produce|consume`` do it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from magnetar.core.errors import MagnetarError


class ClientCommandError(MagnetarError):
    code = "cli.client"


def add_client(commands: Any) -> None:
    produce = commands.add_parser("produce", help="send messages to a topic")
    produce.add_argument("topic")
    produce.add_argument("--messages", "-m", action="append", required=True, help="repeatable")
    produce.add_argument("--num-produce", "-n", type=int, default=1, help="send each N times")
    produce.add_argument("--key", "-k", default=None, help="message key")
    produce.add_argument("--property", "-p", action="append", default=[], help="KEY=VALUE")
    produce.add_argument("--service-url", default=None, help="default pulsar://localhost:6650")
    produce.add_argument("--json", action="store_true", help="print message ids as JSON")
    produce.set_defaults(handler=produce_command)

    consume = commands.add_parser("consume", help="receive messages from a topic")
    consume.add_argument("topic")
    consume.add_argument("--subscription-name", "-s", required=True)
    consume.add_argument("--num-messages", "-n", type=int, default=1, help="0: forever")
    consume.add_argument(
        "--subscription-position", "-p", choices=["Latest", "Earliest"], default="Latest"
    )
    consume.add_argument(
        "--subscription-type",
        "-t",
        choices=["Exclusive", "Shared", "Failover", "Key_Shared"],
        default="Exclusive",
    )
    consume.add_argument("--timeout", type=float, default=30.0, help="seconds to wait per message")
    consume.add_argument("--service-url", default=None, help="default pulsar://localhost:6650")
    consume.add_argument("--json", action="store_true", help="one JSON object per message")
    consume.set_defaults(handler=consume_command)


def _pulsar() -> Any:
    try:
        import pulsar
    except ImportError:  # pragma: no cover - it is a dependency
        raise ClientCommandError(
            "the pulsar-client package is missing: pip install pulsar-client"
        ) from None
    return pulsar


def _client(pulsar: Any, service_url: str | None) -> Any:
    """A client that logs errors only: its default logger writes INFO lines to stdout, which
    broke ``--json`` output and buried our own message. (A Python ``logging`` logger, which
    would go to stderr, made the process abort at exit now and then: "terminate called
    without an active exception".)"""
    return pulsar.Client(
        service_url or "pulsar://localhost:6650",
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _properties(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ClientCommandError(f"property must be KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def produce_command(args: argparse.Namespace) -> int:
    pulsar = _pulsar()
    props = _properties(args.property)
    client = _client(pulsar, args.service_url)
    try:
        producer = client.create_producer(args.topic, batching_enabled=False)
        sent = 0
        for _ in range(args.num_produce):
            for message in args.messages:
                kwargs: dict[str, Any] = {"properties": props}
                if args.key is not None:
                    kwargs["partition_key"] = args.key
                mid = producer.send(message.encode(), **kwargs)
                sent += 1
                if args.json:
                    print(json.dumps({"messageId": str(mid)}))
        if not args.json:
            print(f"{sent} messages successfully produced")
    except pulsar.PulsarException as e:
        raise ClientCommandError(f"produce to {args.topic} failed: {e}") from None
    finally:
        client.close()
    return 0


def consume_command(args: argparse.Namespace) -> int:
    pulsar = _pulsar()
    client = _client(pulsar, args.service_url)
    try:
        consumer = client.subscribe(
            args.topic,
            args.subscription_name,
            consumer_type=getattr(pulsar.ConsumerType, args.subscription_type.replace("_", "")),
            initial_position=getattr(pulsar.InitialPosition, args.subscription_position),
        )
        received = 0
        while args.num_messages == 0 or received < args.num_messages:
            try:
                msg = consumer.receive(int(args.timeout * 1000))
            except pulsar.Timeout:
                raise ClientCommandError(
                    f"no message within {args.timeout:g}s after {received} received"
                ) from None
            _print_message(msg, args.json)
            consumer.acknowledge(msg)
            received += 1
        consumer.close()
    except pulsar.PulsarException as e:
        raise ClientCommandError(f"consume from {args.topic} failed: {e}") from None
    finally:
        client.close()
    return 0


def _print_message(msg: Any, as_json: bool) -> None:
    data = msg.data()
    if as_json:
        print(
            json.dumps(
                {
                    "messageId": str(msg.message_id()),
                    "key": msg.partition_key() or None,
                    "properties": msg.properties(),
                    "publishTime": msg.publish_timestamp(),
                    "value": data.decode("utf-8", "replace"),
                }
            )
        )
    else:
        text = data.decode("utf-8", "replace")
        print(f"----- got message -----\nkey:[{msg.partition_key()}], content:{text}")
    sys.stdout.flush()
