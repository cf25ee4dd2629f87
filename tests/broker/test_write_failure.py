"""A failed append fences the topic (Pulsar's PersistentTopic.addFailed): its producers are
told to go, and until the publishes under way have ended nothing is stored and nobody
attaches, so no SEND a client wrote before it heard of the failure is stored behind the
failed one's back. In process, on a memory ledger whose appends fail on demand."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from magnetar.broker.errors import TopicFencedError
from magnetar.broker.topic import AccessMode, Topic
from magnetar.core.names import TopicName
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.storage.errors import InvalidEntryError, WriteFailedError
from magnetar.testing.memory_ledger import memory_ledger


async def _publish(topic: Topic, producer: Any, payload: bytes) -> Any:
    return await topic.publish(
        producer, payload, count=1, sequence=None, publish_time=None, event_time=-1, fmt=0
    )


def _gate_appends(ledger: Any) -> tuple[Any, list[asyncio.Future[None]]]:
    """Make each append of ``ledger``'s storage wait for a gate of its own (in the list,
    in order), set by the test; returns the real append and the gates."""
    real = ledger.storage.append
    gates: list[asyncio.Future[None]] = []

    async def held(*args: Any, **kwargs: Any) -> Any:
        gate = asyncio.get_running_loop().create_future()
        gates.append(gate)
        await gate
        return await real(*args, **kwargs)

    ledger.storage.append = held
    return real, gates


async def _second_under_way_as_the_first_fails(
    topic: Topic, producer: Any, gates: list[asyncio.Future[None]]
) -> asyncio.Future[Any]:
    """Publish ``a`` and ``b`` (appends gated), fail ``a``'s append; returns ``b``'s
    publish, still under way."""
    failing = asyncio.ensure_future(_publish(topic, producer, b"a"))
    under_way = asyncio.ensure_future(_publish(topic, producer, b"b"))
    while len(gates) < 2:
        await asyncio.sleep(0)
    gates[0].set_exception(WriteFailedError("storage nodes gone"))
    with pytest.raises(WriteFailedError):
        await failing
    return under_way


async def test_a_failed_append_disconnects_producers_until_the_publishes_under_way_end() -> None:
    ledger = await memory_ledger()
    topic = Topic(TopicName.parse("persistent://public/default/t"), ledger, MemoryMetadataStore())
    told: list[str] = []
    producer = await topic.add_producer("p", AccessMode.SHARED)
    producer.on_fenced = lambda: told.append("go")
    real, gates = _gate_appends(ledger)
    under_way = await _second_under_way_as_the_first_fails(topic, producer, gates)
    assert topic.write_failed and producer.closed and told == ["go"]
    with pytest.raises(TopicFencedError):  # stored nothing
        await _publish(topic, producer, b"c")
    with pytest.raises(TopicFencedError):
        await topic.add_producer("p", AccessMode.SHARED)
    gates[1].set_result(None)
    await under_way
    ledger.storage.append = real  # type: ignore[method-assign]
    assert not topic.write_failed  # every publish under way ended
    again = await topic.add_producer("p", AccessMode.SHARED)
    await _publish(topic, again, b"d")
    got = [e.payload for e in await ledger.read(0, max_entries=10)]
    assert b"c" not in got and got[-1] == b"d"


async def test_an_append_refused_for_its_values_fences_nothing() -> None:
    ledger = await memory_ledger()
    topic = Topic(TopicName.parse("persistent://public/default/t"), ledger, MemoryMetadataStore())
    producer = await topic.add_producer("p", AccessMode.SHARED)

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise InvalidEntryError("a timestamp beyond int64")

    ledger.storage.append = refuse  # type: ignore[method-assign]
    with pytest.raises(InvalidEntryError):
        await _publish(topic, producer, b"a")
    assert not producer.closed and not topic.write_failed


async def test_a_producer_waiting_for_exclusive_attaches_only_once_the_fence_lifts() -> None:
    """The failure disconnects the exclusive producer; the one waiting for the topic must not
    take it while publishes are under way (its SENDs would be refused, and those after them
    stored once the fence lifts, ahead of the refused ones' resends)."""
    ledger = await memory_ledger()
    topic = Topic(TopicName.parse("persistent://public/default/t"), ledger, MemoryMetadataStore())
    first = await topic.add_producer("first", AccessMode.EXCLUSIVE)
    waiting = asyncio.ensure_future(topic.add_producer("next", AccessMode.WAIT_FOR_EXCLUSIVE))
    await asyncio.sleep(0)
    real, gates = _gate_appends(ledger)
    under_way = await _second_under_way_as_the_first_fails(topic, first, gates)
    await asyncio.sleep(0)
    assert first.closed and not topic.producers and not waiting.done()
    gates[1].set_result(None)
    await asyncio.gather(under_way, return_exceptions=True)
    ledger.storage.append = real  # type: ignore[method-assign]
    nxt = await asyncio.wait_for(waiting, 5)  # the fence lifted: its turn
    assert topic.producers == [nxt] and nxt.name == "next"
    await _publish(topic, nxt, b"c")
