"""The official pulsar-client against a real standalone: the basic round trip."""

from __future__ import annotations

import pulsar

from magnetar.testing.server import StandaloneProcess


def test_produce_consume_batched_and_not(standalone: StandaloneProcess) -> None:
    client = pulsar.Client(standalone.pulsar_url, operation_timeout_seconds=10)
    try:
        plain = client.create_producer("smoke", batching_enabled=False)
        batched = client.create_producer(
            "smoke", batching_enabled=True, batching_max_publish_delay_ms=5
        )
        consumer = client.subscribe("smoke", "s", initial_position=pulsar.InitialPosition.Earliest)
        sent = [b"plain-%d" % i for i in range(5)]
        for m in sent:
            plain.send(m)
        for i in range(50):
            batched.send_async(b"batch-%d" % i, None)
            sent.append(b"batch-%d" % i)
        batched.flush()
        got = []
        for _ in sent:
            msg = consumer.receive(10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == sent
    finally:
        client.close()
