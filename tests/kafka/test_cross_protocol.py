"""One store, two protocols: what a Kafka client writes a Pulsar client reads, and back,
byte for byte — keys, values, timestamps and headers/properties included."""

from __future__ import annotations

import time

import confluent_kafka
import pulsar

from magnetar.testing.server import StandaloneProcess

N = 20


def _pulsar_client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def test_confluent_kafka_to_pulsar_client(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    sent = [(f"k{i}".encode(), bytes(range(i, i + 40)), 1_700_000_000_000 + i) for i in range(N)]
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 5}
    )
    for key, value, ts in sent:
        producer.produce(topic, key=key, value=value, timestamp=ts, headers=[("origin", b"kafka")])
    assert producer.flush(30) == 0

    client = _pulsar_client(standalone)
    try:
        consumer = client.subscribe(
            f"persistent://public/default/{topic}",
            "pulsar-reader",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = []
        for _ in range(N):
            msg = consumer.receive(10_000)
            consumer.acknowledge(msg)
            got.append(msg)
    finally:
        client.close()
    assert [m.data() for m in got] == [v for _, v, _ in sent]
    assert [m.partition_key() for m in got] == [k.decode() for k, _, _ in sent]
    assert [m.event_timestamp() for m in got] == [ts for _, _, ts in sent]
    assert all(m.properties() == {"origin": "kafka"} for m in got)


def test_pulsar_client_to_confluent_kafka(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    client = _pulsar_client(standalone)
    sent = [(f"k{i}", bytes(range(200 - i, 255)), 1_600_000_000_000 + i) for i in range(N)]
    try:
        producer = client.create_producer(
            f"persistent://public/default/{topic}",
            batching_enabled=True,
            compression_type=pulsar.CompressionType.LZ4,
        )
        for key, value, ts in sent:
            producer.send_async(
                value, None, partition_key=key, event_timestamp=ts, properties={"origin": "pulsar"}
            )
        producer.flush()
    finally:
        client.close()

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    got = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [v for _, v, _ in sent]
    assert [m.key() for m in got] == [k.encode() for k, _, _ in sent]
    assert [m.timestamp()[1] for m in got] == [ts for _, _, ts in sent]
    assert [m.offset() for m in got] == list(range(N))
    assert all(m.headers() == [("origin", b"pulsar")] for m in got)


def test_pulsar_reader_sees_the_end_of_a_kafka_written_topic(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    client = _pulsar_client(standalone)
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic}", pulsar.MessageId.earliest
        )
        got = []
        while reader.has_message_available():  # GET_LAST_MESSAGE_ID on a Kafka entry
            got.append(reader.read_next(10_000).data())
    finally:
        client.close()
    assert got == [b"v%d" % i for i in range(5)]
