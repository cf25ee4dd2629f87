"""A damaged index never truncates reads silently (issue 21, item 7).

A closed segment's offset and time indexes are sparse pointers into its file. A garbage
index used to send reads past entries without a word (246 of 3,000 delivered). Now an
index is checked when loaded (bounds and order) and every lookup checks that the entry it
lands on is the one the index names; one that does not verify is logged, rebuilt from the
segment (whose every entry carries a checksum) and written back.
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from magnetar.core.config import Settings
from magnetar.storage import SegmentState, StorageEngine
from magnetar.storage.catalog import partition_dir
from magnetar.storage.segment import segment_file
from tests.storage.test_corruption import (
    append_range,
    expected,
    opened,
    read_all,
    settings_for,
    shape,
)

ENTRIES = 60
POINT = struct.Struct(">qq")


def _index_files(settings: Settings, engine: StorageEngine) -> tuple[Path, Path]:
    [info] = [s for s in engine.segments("p1") if s.state is SegmentState.CLOSED]
    directory = partition_dir(settings, info.partition_id)
    return (
        segment_file(directory, info.segment_id, ".index"),
        segment_file(directory, info.segment_id, ".timeindex"),
    )


def _skip_ahead(path: Path) -> None:
    """Every point now names the entry of the next point: plausible, and wrong."""
    points = list(POINT.iter_unpack(path.read_bytes()))
    shifted = [(o, p) for (o, _), (_, p) in zip(points, points[1:] + points[-1:], strict=True)]
    path.write_bytes(b"".join(POINT.pack(o, p) for o, p in shifted))


def _mid_entry(path: Path) -> None:
    """Positions that fall inside entries."""
    points = list(POINT.iter_unpack(path.read_bytes()))
    path.write_bytes(b"".join(POINT.pack(o, p + 7 if p else 0) for o, p in points))


DAMAGE: dict[str, Callable[[Path, Path], object]] = {
    "garbage": lambda ix, tx: ix.write_bytes(random.Random(7).randbytes(ix.stat().st_size)),
    "truncated": lambda ix, tx: ix.write_bytes(ix.read_bytes()[:20]),
    "points skip ahead": lambda ix, tx: _skip_ahead(ix),
    "positions inside entries": lambda ix, tx: _mid_entry(ix),
    "time index garbage": lambda ix, tx: tx.write_bytes(
        random.Random(8).randbytes(tx.stat().st_size)
    ),
    "missing": lambda ix, tx: ix.unlink(),
}


@pytest.mark.parametrize("damage", DAMAGE)
async def test_a_damaged_index_is_rebuilt_and_every_entry_is_read(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(tmp_path, index_interval_bytes=2048)
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        await append_range(engine, "p1", range(ENTRIES))
        await engine.roll("p1")
        index, timeindex = _index_files(settings, engine)
    DAMAGE[damage](index, timeindex)
    with caplog.at_level(logging.WARNING, logger="magnetar.storage.segment"):
        async with opened(settings) as engine:
            assert shape(await read_all(engine, "p1")) == expected(range(ENTRIES))
            for i in range(0, ENTRIES, 7):  # lookups into the middle too
                [first, *_] = await engine.read("p1", i * 2 + 1, max_entries=1)
                assert first.base_offset == i * 2
    assert any("did not verify" in r.getMessage() for r in caplog.records)
    caplog.clear()
    async with opened(settings) as engine:  # written back: no warning the second time
        assert shape(await read_all(engine, "p1")) == expected(range(ENTRIES))
    assert not any("did not verify" in r.getMessage() for r in caplog.records)
