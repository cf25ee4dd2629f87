"""``magnetar produce`` and ``magnetar consume``, as ``pulsar-client produce|consume`` do it.

The service URL comes from the same sources as the server's settings, so the commands find
a standalone whose ports moved: ``--service-url``, else ``MAGNETAR_SERVICE_URL``, else
``pulsar://HOST:PULSAR_PORT`` built from ``--config`` and the ``MAGNETAR_*`` variables
(``MAGNETAR_PULSAR_PORT``, ``MAGNETAR_ADVERTISED_ADDRESS``, ``MAGNETAR_BIND_ADDRESS``) as the
server reads them. An unreachable URL fails in seconds with one line saying so; the Pulsar
client's own log lines appear only with ``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.parse
from typing import Any

from magnetar.cli.progress import ProgressBar
from magnetar.core.config import build_settings
from magnetar.core.errors import MagnetarError

CONNECT_TIMEOUT = 3.0  # seconds to reach the service URL before giving up
PROGRESS_FROM = 1000  # produce shows its rate (on stderr) from this many messages on
_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651, "http": 8080, "https": 8443}


class ClientCommandError(MagnetarError):
    code = "cli.client"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


def add_client(commands: Any) -> None:
    produce = commands.add_parser("produce", help="send messages to a topic")
    produce.add_argument("topic")
    produce.add_argument("--messages", "-m", action="append", required=True, help="repeatable")
    produce.add_argument("--num-produce", "-n", type=int, default=1, help="send each N times")
    produce.add_argument("--key", "-k", default=None, help="message key")
    produce.add_argument("--property", "-p", action="append", default=[], help="KEY=VALUE")
    _connection_arguments(produce)
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
    _connection_arguments(consume)
    consume.add_argument("--json", action="store_true", help="one JSON object per message")
    consume.set_defaults(handler=consume_command)


def _connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--service-url",
        default=None,
        help="pulsar://HOST:PORT (default: MAGNETAR_SERVICE_URL, else built from --config and "
        "MAGNETAR_PULSAR_PORT etc. as the server reads them, else pulsar://localhost:6650)",
    )
    parser.add_argument("--config", "-c", default=None, help="the server's TOML settings file")
    parser.add_argument("--verbose", "-v", action="store_true", help="the client's log lines")


def service_url(args: argparse.Namespace) -> tuple[str, str]:
    """The Pulsar URL to use and where it came from (for the message when unreachable)."""
    if args.service_url:
        return args.service_url, "--service-url"
    if os.environ.get("MAGNETAR_SERVICE_URL"):
        return os.environ["MAGNETAR_SERVICE_URL"], "MAGNETAR_SERVICE_URL"
    settings = build_settings(config_file=args.config)
    host = settings.advertised_address or settings.bind_address
    host = "localhost" if host in ("", "0.0.0.0", "::") else host
    host = f"[{host}]" if ":" in host else host
    origin = [f"--config {args.config}"] if args.config else []
    origin += sorted(
        k
        for k in ("MAGNETAR_PULSAR_PORT", "MAGNETAR_ADVERTISED_ADDRESS", "MAGNETAR_BIND_ADDRESS")
        if os.environ.get(k)
    )
    return f"pulsar://{host}:{settings.pulsar_port}", " and ".join(origin) or "the defaults"


def check_reachable(url: str, origin: str) -> None:
    """Connect to one of the URL's hosts within CONNECT_TIMEOUT or raise ClientCommandError
    (the client itself would retry for its operation timeout, then say only TimeOut)."""
    parsed = urllib.parse.urlsplit(url)
    default = _DEFAULT_PORTS.get(parsed.scheme)
    if default is None or not parsed.netloc:
        raise ClientCommandError(
            f"service URL {url!r} (from {origin}) is not pulsar://HOST:PORT, "
            "pulsar+ssl://HOST:PORT or http://HOST:PORT"
        )
    for host, port in _addresses(parsed.netloc, default):
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
                return
        except OSError:
            continue
    raise ClientCommandError(
        f"cannot reach {url} — is `magnetar standalone` running? (the URL comes from {origin}; "
        "set --service-url or MAGNETAR_SERVICE_URL, or MAGNETAR_PULSAR_PORT / --config as "
        "the server has them)"
    )


def _addresses(netloc: str, default: int) -> list[tuple[str, int]]:
    """``h1:6650,h2`` (Pulsar's multi-host form) as (host, port) pairs."""
    out = []
    for item in netloc.rpartition("@")[2].split(","):
        parsed = urllib.parse.urlsplit(f"//{item}")
        try:
            out.append((parsed.hostname or "localhost", parsed.port or default))
        except ValueError:  # a port that is not a number: nothing to connect to
            continue
    return out


def _pulsar() -> Any:
    try:
        import pulsar
    except ImportError:  # pragma: no cover - it is a dependency
        raise ClientCommandError(
            "the pulsar-client package is missing: pip install pulsar-client"
        ) from None
    return pulsar


def _client(pulsar: Any, args: argparse.Namespace) -> Any:
    """A client for the resolved service URL, checked reachable first. Silent unless
    ``--verbose``: its console logger writes to stdout, which broke ``--json`` output and
    buried our own message, so by default it logs to /dev/null; errors reach the user as
    exceptions. (A Python ``logging`` logger, which would go to stderr, made the process
    abort at exit now and then: "terminate called without an active exception".)"""
    url, origin = service_url(args)
    check_reachable(url, origin)
    if args.verbose:
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Info)
    else:
        logger = pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)
    return pulsar.Client(
        url, operation_timeout_seconds=10, connection_timeout_ms=5000, logger=logger
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
    client = _client(pulsar, args)
    try:
        producer = client.create_producer(args.topic, batching_enabled=False)
        sent, total = 0, args.num_produce * len(args.messages)
        bar = ProgressBar(args.topic, "msgs") if total >= PROGRESS_FROM else None
        started = time.monotonic()
        for _ in range(args.num_produce):
            for message in args.messages:
                kwargs: dict[str, Any] = {"properties": props}
                if args.key is not None:
                    kwargs["partition_key"] = args.key
                mid = producer.send(message.encode(), **kwargs)
                sent += 1
                if args.json:
                    print(json.dumps({"messageId": str(mid)}))
                if bar is not None:
                    bar.update(sent, total)
        if bar is not None:
            elapsed = max(time.monotonic() - started, 1e-9)
            bar.finish(f"{sent:,} sent, {sent / elapsed:,.0f} msgs/s")
        if not args.json:
            print(f"{sent} messages successfully produced")
    except pulsar.PulsarException as e:
        raise ClientCommandError(f"produce to {args.topic} failed: {e}") from None
    finally:
        client.close()
    return 0


def consume_command(args: argparse.Namespace) -> int:
    pulsar = _pulsar()
    client = _client(pulsar, args)
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
