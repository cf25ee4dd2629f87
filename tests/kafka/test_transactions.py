"""Kafka transactions (KIP-98, issue 17) with the real clients: confluent-kafka's
init_transactions / begin / send_offsets_to_transaction / commit / abort, read_committed and
read_uncommitted consumers, kafka-python's and aiokafka's transactional producers; zombie
fencing by epoch, the transaction timeout, and state that survives a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import aiokafka
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import run_standalone
from tests.kafka.conftest import TIMEOUT_S
from tests.kafka.reading import read_to_end


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory)


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT_S)
    return name


def _producer(bootstrap: str, tid: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **config})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _read_all(
    bootstrap: str, topic: str, isolation: str, expect: int, partitions: int = 1
) -> list[bytes]:
    """Every value of ``topic`` a fresh consumer with ``isolation`` reads to its end."""
    got = read_to_end(bootstrap, topic, expect, isolation=isolation, partitions=partitions)
    return [message.value() for message in got]


def test_committed_and_aborted_transactions(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    producer = _producer(bootstrap, f"tid-{topic}")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"aborted-%d" % i, partition=i % 2)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"last", partition=0)
    producer.commit_transaction(TIMEOUT_S)
    committed = _read_all(bootstrap, topic, "read_committed", 11, partitions=2)
    assert sorted(committed) == sorted([b"committed-%d" % i for i in range(10)] + [b"last"])
    everything = _read_all(bootstrap, topic, "read_uncommitted", 21, partitions=2)
    assert len(everything) == 21


def test_an_open_transaction_holds_read_committed_back(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"before")
    plain.flush(TIMEOUT_S)
    producer = _producer(bootstrap, f"tid-{topic}")
    producer.begin_transaction()
    producer.produce(topic, b"inside")
    producer.flush(TIMEOUT_S)
    plain.produce(topic, b"after")
    plain.flush(TIMEOUT_S)
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"before"]
    producer.commit_transaction(TIMEOUT_S)
    assert _read_all(bootstrap, topic, "read_committed", 3) == [b"before", b"inside", b"after"]


def test_exactly_once_read_process_write(bootstrap: str) -> None:
    source, sink = _topic(bootstrap, partitions=1), _topic(bootstrap, partitions=1)
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        seed.produce(source, b"%d" % i)
    seed.flush(TIMEOUT_S)
    group = f"eos-{source}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([source])
    producer = _producer(bootstrap, f"tid-{source}")
    seen = 0
    try:
        while seen < 20:
            batch = consumer.consume(20, 1.0)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                assert message.error() is None
                producer.produce(sink, message.value() + b"-out")
            seen += len(batch)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), TIMEOUT_S
            )
            producer.commit_transaction(TIMEOUT_S)
    finally:
        consumer.close()
    assert sorted(_read_all(bootstrap, sink, "read_committed", 20)) == sorted(
        b"%d-out" % i for i in range(20)
    )
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (committed,) = check.committed([TopicPartition(source, 0)], TIMEOUT_S)
    finally:
        check.close()
    assert committed.offset == 20


def test_a_new_producer_fences_the_old_one(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)
    tid = f"tid-{topic}"
    old = _producer(bootstrap, tid)
    old.begin_transaction()
    old.produce(topic, b"zombie")
    old.flush(TIMEOUT_S)
    new = _producer(bootstrap, tid)  # aborts the old one's transaction, bumps the epoch
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].fatal()
    new.begin_transaction()
    new.produce(topic, b"fresh")
    new.commit_transaction(TIMEOUT_S)
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"fresh"]


def test_an_abandoned_transaction_is_aborted_at_its_timeout(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)
    producer = _producer(bootstrap, f"tid-{topic}", **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, b"abandoned")
    producer.flush(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"after")
    plain.flush(TIMEOUT_S)
    # the coordinator aborts it: read_committed then gets past it (this waits for that)
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"after"]


def test_the_transaction_state_survives_a_restart(
    standalone: StandaloneProcess, bootstrap: str
) -> None:
    topic = _topic(bootstrap, partitions=1)
    tid = f"tid-{topic}"
    producer = _producer(bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, b"open-at-restart")
    producer.flush(TIMEOUT_S)
    standalone.stop()
    standalone.start()
    again = _producer(bootstrap, tid)  # the stored transaction is found and aborted
    again.begin_transaction()
    again.produce(topic, b"after-restart")
    again.commit_transaction(TIMEOUT_S)
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"after-restart"]


def test_an_open_transaction_survives_kill_9(standalone: StandaloneProcess, bootstrap: str) -> None:
    """A partition's second transaction writes nothing when it opens (the index finds it
    in the log after its record): after kill -9 it is still open, so read_committed readers
    stop before it and before a plain message after it, until it is aborted."""
    topic = _topic(bootstrap, partitions=1)
    tid = f"tid-{topic}"
    producer = _producer(bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, b"first")
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"open-at-crash")
    producer.flush(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"plain-after")
    assert plain.flush(TIMEOUT_S) == 0
    standalone.kill()
    standalone.start()
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"first"]  # held at the LSO
    again = _producer(bootstrap, tid)  # aborts the open transaction (and fences the old one)
    again.begin_transaction()
    again.produce(topic, b"after-restart")
    again.commit_transaction(TIMEOUT_S)
    got = _read_all(bootstrap, topic, "read_committed", 3)
    assert got == [b"first", b"plain-after", b"after-restart"]


def test_kafka_python_transactional_producer(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{topic}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kp-committed")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kp-aborted")
        producer.abort_transaction()
    finally:
        producer.close()
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"kp-committed"]


def test_aiokafka_transactional_producer(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=1)

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"aio-{topic}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-committed")
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aio-aborted")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    assert _read_all(bootstrap, topic, "read_committed", 1) == [b"aio-committed"]


def test_a_pulsar_reader_gets_committed_records_only(
    standalone: StandaloneProcess, bootstrap: str
) -> None:
    """No markers, nothing aborted, nothing of an open transaction (tests/spark has the
    other readers: consumer, HTTP browser, Spark source)."""
    import pulsar

    topic = _topic(bootstrap, partitions=1)
    producer = _producer(bootstrap, f"tid-{topic}")
    for value, commit in ((b"committed", True), (b"aborted", False), (b"open", None)):
        producer.begin_transaction()
        producer.produce(topic, value)
        producer.flush(TIMEOUT_S)
        if commit is True:
            producer.commit_transaction(TIMEOUT_S)
        elif commit is False:
            producer.abort_transaction(TIMEOUT_S)
    client = pulsar.Client(standalone.pulsar_url)
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic}-partition-0", pulsar.MessageId.earliest
        )
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(int(TIMEOUT_S * 1000)).data())
        producer.commit_transaction(TIMEOUT_S)
        got.append(reader.read_next(int(TIMEOUT_S * 1000)).data())
        assert not reader.has_message_available()
    finally:
        client.close()
    assert got == [b"committed", b"open"]
