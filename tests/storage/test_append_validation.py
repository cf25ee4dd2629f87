"""An append whose values the entry header cannot hold fails alone, before the flusher.

The header packs times as int64, the count as int32 and the format as u8. A value outside
used to raise inside the flusher task, end it, and leave every later append of the node
waiting forever (issue 13, hazard 5).
"""

from __future__ import annotations

import pytest

from magnetar.storage import InvalidEntryError
from tests.storage.conftest import OpenEngine

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
