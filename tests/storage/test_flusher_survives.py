"""The flusher survives anything: an append whose values the entry header cannot hold fails
alone, before the flusher; an unexpected failure inside a group fails only that group.

The header packs times as int64, the count as int32 and the format as u8. A value outside
used to raise inside the flusher task, end it, and leave every later append of the node
waiting forever (issue 13, hazard 5).
"""

from __future__ import annotations

import pytest

from magnetar.storage import InvalidEntryError, WriteFailedError
from tests.storage.conftest import OpenEngine, reopen

BAD = [
    {"publish_time": 1 << 63},
    {"event_time": 1 << 63},
    {"event_time": -(1 << 63) - 1},
    {"count": 0},
    {"count": 1 << 31},
    {"fmt": 256},
]


@pytest.mark.parametrize(
    "bad", BAD, ids=[next(iter(b.items()))[0] + "=" + str(next(iter(b.values()))) for b in BAD]
)
async def test_an_unstorable_append_fails_alone(
    open_engine: OpenEngine, bad: dict[str, int]
) -> None:
    engine = await open_engine()
    await engine.create_partition("p")
    first = await engine.append("p", b"before")
    with pytest.raises(InvalidEntryError, match="entry refused"):
        await engine.append("p", b"bad", **bad)
    after = await engine.append("p", b"after")  # the flusher is alive
    assert (first.base_offset, after.base_offset) == (0, 1)
    got = await engine.read("p", 0, max_entries=10)
    assert [e.payload for e in got] == [b"before", b"after"]


@pytest.mark.parametrize("where", ["_plan", "_write", "_copy"])
async def test_an_unexpected_failure_fails_its_group_and_the_flusher_goes_on(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Any exception inside a group commit (a bug, not the disk) fails that group's appends
    with WriteFailedError, cuts its bytes back off, and later appends are stored."""
    engine = await open_engine()
    await engine.create_partition("p")
    await engine.append("p", b"before")
    real = getattr(engine, where)
    calls = 0

    def broken(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected bug")
        return real(*args)

    monkeypatch.setattr(engine, where, broken)
    with pytest.raises(WriteFailedError, match="injected bug"):
        await engine.append("p", b"lost in the bug")
    after = await engine.append("p", b"after")
    assert after.base_offset == 1  # the failed group's offset is reused: no gap
    got = await engine.read("p", 0, max_entries=10)
    assert [e.payload for e in got] == [b"before", b"after"]
    engine = await reopen(engine, open_engine)  # the journal holds nothing of the failed group
    got = await engine.read("p", 0, max_entries=10)
    assert [e.payload for e in got] == [b"before", b"after"]
