"""Produce and consume with the official client: batching, every compression codec, what a
message carries (key, ordering key, properties, event time, ids), and producer access modes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS, RawConnection, assert_nothing_more, receive_n

T = pb.BaseCommand.Type

CODECS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


def _body(i: int) -> bytes:
    # Repetitive enough that every codec really shrinks it, distinct per message.
    return (f"message {i:04d} " * 40).encode()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: str(c).rsplit(".", 1)[-1])
def test_round_trip_keeps_payload_key_properties_and_times(
    client: pulsar.Client, topic: str, codec: pulsar.CompressionType, batching: bool
) -> None:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        compression_type=codec,
        batching_enabled=batching,
        batching_max_messages=7,
        batching_max_publish_delay_ms=5,
    )
    n = 20
    before = int(time.time() * 1000)
    sent_ids: dict[int, pulsar.MessageId] = {}
    done = threading.Semaphore(0)

    def receipt(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, mid: pulsar.MessageId) -> None:
            assert result == pulsar.Result.Ok
            sent_ids[i] = mid
            done.release()

        return callback

    for i in range(n):
        producer.send_async(
            _body(i),
            receipt(i),
            partition_key=f"key-{i % 3}",
            properties={"index": str(i), "codec": str(codec)},
            event_timestamp=1_000_000 + i,
        )
    producer.flush()
    for _ in range(n):
        assert done.acquire(timeout=RECEIVE_MS / 1000)

    got = receive_n(consumer, n)
    assert [m.data() for m in got] == [_body(i) for i in range(n)]
    for i, m in enumerate(got):
        assert m.partition_key() == f"key-{i % 3}"
        assert m.properties() == {"index": str(i), "codec": str(codec)}
        assert m.event_timestamp() == 1_000_000 + i
        assert m.publish_timestamp() >= before
        assert m.message_id() == sent_ids[i]
    if batching:  # several messages share an entry, told apart by their batch index
        assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) < n
        assert any(m.message_id().batch_index() > 0 for m in got)
    assert_nothing_more(consumer)


def test_ordering_key_and_empty_payload_survive(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"", ordering_key="ok-1")
    producer.send(b"x", partition_key="pk", ordering_key="ok-2")
    first, second = receive_n(consumer, 2)
    assert first.data() == b"" and first.ordering_key() == "ok-1"
    assert second.data() == b"x" and second.partition_key() == "pk"
    assert second.ordering_key() == "ok-2"


def test_message_ids_increase_and_send_returns_them(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    ids = [producer.send(b"%d" % i) for i in range(5)]
    assert ids == sorted(ids) and len(set(map(str, ids))) == 5
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.message_id() for m in receive_n(consumer, 5)] == ids


def test_producer_name_is_reported_and_unique_names_are_enforced(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, producer_name="writer-1")
    assert producer.producer_name() == "writer-1"
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="writer-1")
    generated = client.create_producer(topic)
    assert generated.producer_name() and generated.producer_name() != "writer-1"


# -- producer access modes ------------------------------------------------------------------


def test_exclusive_producer_refuses_a_second_producer(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced, match="ProducerFenced"):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy, match="ProducerBusy"):
        client.create_producer(topic)  # Shared, while an exclusive producer holds the topic
    first.send(b"still the only writer")
    first.close()
    # Released: another exclusive producer may take over.
    client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive).close()


def test_exclusive_producer_is_refused_while_shared_producers_exist(
    client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)


def test_wait_for_exclusive_producer_waits_until_the_first_closes(
    client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "s")
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    created = threading.Event()
    result: dict[str, object] = {}

    def wait_for_it() -> None:
        try:
            result["producer"] = client.create_producer(
                topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive
            )
        except Exception as e:  # reported to the test thread below
            result["error"] = e
        created.set()

    waiter = threading.Thread(target=wait_for_it, daemon=True)
    waiter.start()
    # The C++ client gives up on a queued producer after its operation timeout (10 s here),
    # so hold the topic well below that.
    assert not created.wait(1.0), f"should still be queued, got {result}"
    first.send(b"from first")
    first.close()
    assert created.wait(RECEIVE_MS / 1000), "the waiting producer never got the topic"
    waiter.join()
    assert "error" not in result, result.get("error")
    second = result["producer"]
    assert isinstance(second, pulsar.Producer)
    second.send(b"from second")
    with pytest.raises(pulsar.ProducerBusy):  # it holds the topic exclusively now
        client.create_producer(topic)
    assert [m.data() for m in receive_n(consumer, 2)] == [b"from first", b"from second"]


async def test_queued_producer_is_answered_not_ready_and_can_be_withdrawn(
    standalone: StandaloneProcess, topic: str
) -> None:
    """Wire level, which the client hides: a WaitForExclusive producer that has to wait gets
    PRODUCER_SUCCESS(producer_ready=false) at once; CLOSE_PRODUCER withdraws it from the queue,
    so it never takes the topic."""
    async with RawConnection.open(standalone.pulsar_port) as conn:
        await conn.request(
            T.PRODUCER, producer=_producer_cmd(topic, 1, 1, pb.ProducerAccessMode.Exclusive)
        )
        queued = await conn.request(
            T.PRODUCER, producer=_producer_cmd(topic, 2, 2, pb.ProducerAccessMode.WaitForExclusive)
        )
        assert queued.producer_success.producer_ready is False
        withdraw = pb.CommandCloseProducer(producer_id=2, request_id=3)
        assert (await conn.request(T.CLOSE_PRODUCER, close_producer=withdraw)).type == T.SUCCESS
        release = pb.CommandCloseProducer(producer_id=1, request_id=4)
        assert (await conn.request(T.CLOSE_PRODUCER, close_producer=release)).type == T.SUCCESS
        # Had the withdrawn producer taken the topic, a shared producer would be refused.
        shared = await conn.request(
            T.PRODUCER, producer=_producer_cmd(topic, 5, 5, pb.ProducerAccessMode.Shared)
        )
        assert shared.type == T.PRODUCER_SUCCESS and shared.producer_success.producer_ready


def _producer_cmd(topic: str, producer_id: int, request_id: int, mode: int) -> pb.CommandProducer:
    return pb.CommandProducer(
        topic=topic, producer_id=producer_id, request_id=request_id, producer_access_mode=mode
    )


def test_exclusive_with_fencing_takes_over_and_fences_the_old_producer(
    client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "s")
    old = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    old.send(b"old")
    new = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    new.send(b"new")
    with pytest.raises(pulsar.PulsarException):
        old.send(b"fenced off")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"old", b"new"]
    assert_nothing_more(consumer)
