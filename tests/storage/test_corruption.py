"""Damaged bytes on disk: acknowledged data is never silently skipped or cut.

Damage inside acknowledged data (a closed segment, a journal record followed by others,
an open segment below its checkpointed size) raises CorruptionError naming the file and
the byte position of the damaged entry. Damage where an unacknowledged write was torn (the
end of the last journal file, an open segment above its checkpointed size) is cut, and the
journal refills what the segment lost.

To get files as a crash leaves them (journal records not yet checkpointed), a test copies
the data directory while the engine is still open: a SIGKILL keeps the page cache, so the
copy is exactly what the next start would find.
"""

from __future__ import annotations

import hashlib
import logging
import random
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from magnetar.core.config import Settings, build_settings
from magnetar.meta import open_metadata_store
from magnetar.storage import (
    CorruptionError,
    Entry,
    SegmentInfo,
    SegmentState,
    StorageEngine,
    StorageSettings,
)
from magnetar.storage.catalog import partition_dir
from magnetar.storage.journal import journal_file, list_journal_files
from magnetar.storage.segment import segment_file

PAYLOAD = 1000
COUNT = 2  # messages per entry, so offsets and entry numbers differ
ENTRY = 40 + PAYLOAD  # entry header + payload, as laid out in a segment file
RECORD = 8 + ENTRY  # journal prefix (partition id, header CRC) + entry

Damage = Callable[[Path], object]  # does something bad to a file


def settings_for(data_dir: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "data_dir": data_dir,
        "segment_max_bytes": 1 << 20,  # tests roll explicitly
        "journal_max_bytes": 1 << 20,  # and checkpoint explicitly
        "tail_cache_bytes": 1,  # reads go to the files, where the damage is
    }
    values.update(overrides)
    return build_settings(env={}, overrides=values)


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[StorageEngine]:
    meta = open_metadata_store(settings.metadata)
    try:
        engine = await StorageEngine.open(StorageSettings.of(settings), meta)
        try:
            yield engine
        finally:
            await engine.aclose()
    finally:
        await meta.aclose()


async def open_fails(settings: Settings) -> CorruptionError:
    """Open ``settings`` expecting CorruptionError; returns it."""
    meta = open_metadata_store(settings.metadata)
    try:
        with pytest.raises(CorruptionError) as caught:
            engine = await StorageEngine.open(StorageSettings.of(settings), meta)
            await engine.aclose()
    finally:
        await meta.aclose()
    return caught.value


def payload(i: int) -> bytes:
    return hashlib.shake_256(i.to_bytes(4, "big")).digest(PAYLOAD)


async def append_range(engine: StorageEngine, name: str, numbers: range) -> list[Entry]:
    return [await engine.append(name, payload(i), count=COUNT) for i in numbers]


async def read_all(engine: StorageEngine, name: str) -> list[Entry]:
    out: list[Entry] = []
    offset = engine.start_offset(name)
    while offset < engine.end_offset(name):
        batch = await engine.read(name, offset)
        out += batch
        offset = batch[-1].next_offset
    return out


def expected(numbers: range) -> list[tuple[int, int, bytes]]:
    return [(i * COUNT, COUNT, payload(i)) for i in numbers]


def shape(entries: list[Entry]) -> list[tuple[int, int, bytes]]:
    return [(e.base_offset, e.count, e.payload) for e in entries]


def snapshot(src: Path, dst: Path) -> Path:
    """Copy a live data directory: the state a SIGKILL right now would leave behind."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*-shm"))
    return dst


def segment_path(settings: Settings, info: SegmentInfo) -> Path:
    return segment_file(partition_dir(settings, info.partition_id), info.segment_id)


def only_journal(settings: Settings) -> Path:
    numbers = list_journal_files(settings.journal_path)
    assert len(numbers) == 1, f"expected one journal file, found {numbers}"
    return journal_file(settings.journal_path, numbers[0])


def flip(path: Path, position: int) -> None:
    with path.open("r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def truncate(path: Path, size: int) -> None:
    with path.open("r+b") as f:
        f.truncate(size)


def assert_names(error: CorruptionError, path: Path, position: int) -> None:
    assert (error.path, error.position) == (str(path), position), str(error)
    assert str(path) in str(error) and f"byte {position}" in str(error), str(error)
    assert error.code == "storage.corrupt" and not error.retriable


# -- (a) closed segments --------------------------------------------------------------------

# Where inside the damaged entry a byte is flipped (entry layout: see records.py).
ENTRY_DAMAGE = {
    "payload": 40 + PAYLOAD // 2,
    "checksum": 5,
    "length": 1,  # turns the length absurd: it runs past the written data
    "version": 8,
    "count": 22,
}
DAMAGED = 6  # number of the damaged entry in the closed segment (of 10)


async def closed_segment(engine: StorageEngine, settings: Settings) -> Path:
    """p1 with entries 0-9 in a closed segment and 10-12 in the open one."""
    await engine.create_partition("p1")
    await append_range(engine, "p1", range(10))
    assert await engine.roll("p1")
    await append_range(engine, "p1", range(10, 13))
    info = engine.segments("p1")[0]
    assert (info.state, info.size) == (SegmentState.CLOSED, 10 * ENTRY)
    path = segment_path(settings, info)
    assert path.stat().st_size == 10 * ENTRY
    return path


@pytest.mark.parametrize("where", ENTRY_DAMAGE)
@pytest.mark.parametrize("reopen", [False, True], ids=["live", "reopened"])
async def test_damaged_closed_segment_names_file_and_position(
    tmp_path: Path, where: str, reopen: bool
) -> None:
    settings = settings_for(tmp_path)
    async with opened(settings) as engine:
        path = await closed_segment(engine, settings)
        if not reopen:
            flip(path, DAMAGED * ENTRY + ENTRY_DAMAGE[where])
            await _assert_damage_confined(engine, path)
    if reopen:
        flip(path, DAMAGED * ENTRY + ENTRY_DAMAGE[where])
        async with opened(settings) as engine:  # opening does not scan closed segments
            await _assert_damage_confined(engine, path)


async def _assert_damage_confined(engine: StorageEngine, path: Path) -> None:
    with pytest.raises(CorruptionError) as caught:
        await engine.read("p1", DAMAGED * COUNT)
    assert_names(caught.value, path, DAMAGED * ENTRY)
    # A scan across the damage gets every intact entry before it; the next read, which
    # starts at the damage, raises (issue 21, item 6: no silence, no lost prefix).
    assert shape(await engine.read("p1", 0, max_entries=1000)) == expected(range(DAMAGED))
    for i in range(DAMAGED):
        got = await engine.read("p1", i * COUNT + 1, max_entries=1)
        assert shape(got) == expected(range(i, i + 1))
    assert shape(await engine.read("p1", 10 * COUNT)) == expected(range(10, 13))


async def test_truncated_closed_segment_names_file_and_position(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    async with opened(settings) as engine:
        path = await closed_segment(engine, settings)
    truncate(path, DAMAGED * ENTRY + 100)
    async with opened(settings) as engine:
        await _assert_damage_confined(engine, path)


async def test_missing_closed_segment_is_corruption_not_an_empty_read(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    async with opened(settings) as engine:
        path = await closed_segment(engine, settings)
    path.unlink()
    async with opened(settings) as engine:
        with pytest.raises(CorruptionError) as caught:
            await engine.read("p1", 0)
        assert_names(caught.value, path, 0)
        assert shape(await engine.read("p1", 10 * COUNT)) == expected(range(10, 13))


# -- (b) acknowledged journal records ------------------------------------------------------

# Where inside the damaged record a byte is flipped: prefix, entry header, payload.
RECORD_DAMAGE = {
    "partition id": 2,
    "header checksum": 6,
    "entry length": 8 + 1,
    "entry offset": 8 + 15,
    "payload": 8 + 40 + PAYLOAD // 2,
}


async def crashed_with_journal(tmp_path: Path, entries: int) -> Settings:
    """Entries 0..n-1 alternating over p1/p2, crashed before any checkpoint; returns the
    settings of the crashed copy."""
    settings = settings_for(tmp_path / "live")
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        await engine.create_partition("p2")
        for i in range(entries):
            await engine.append(f"p{1 + i % 2}", payload(i), count=COUNT)
        copy = snapshot(settings.data_dir, tmp_path / "crashed")
    return settings_for(copy)


@pytest.mark.parametrize("where", RECORD_DAMAGE)
async def test_damaged_journal_record_before_valid_ones_stops_open(
    tmp_path: Path, where: str
) -> None:
    crashed = await crashed_with_journal(tmp_path, entries=8)
    journal = only_journal(crashed)
    assert journal.stat().st_size == 8 * RECORD
    flip(journal, 3 * RECORD + RECORD_DAMAGE[where])
    assert_names(await open_fails(crashed), journal, 3 * RECORD)
    # Nothing was cut to make the damage go away: a second start refuses just the same.
    assert journal.stat().st_size == 8 * RECORD
    assert_names(await open_fails(crashed), journal, 3 * RECORD)


async def test_damaged_record_followed_by_one_empty_entry_stops_open(tmp_path: Path) -> None:
    """The smallest valid record (an entry with an empty payload: 48 bytes) after the
    damage still proves the damage is not a torn tail."""
    settings = settings_for(tmp_path / "live")
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        await append_range(engine, "p1", range(4))
        last = await engine.append("p1", b"", count=1)
        assert last.base_offset == 4 * COUNT
        crashed = settings_for(snapshot(settings.data_dir, tmp_path / "crashed"))
    journal = only_journal(crashed)
    assert journal.stat().st_size == 4 * RECORD + 48
    flip(journal, 3 * RECORD + RECORD_DAMAGE["payload"])
    assert_names(await open_fails(crashed), journal, 3 * RECORD)


async def test_damaged_last_record_of_a_rotated_journal_file_stops_open(tmp_path: Path) -> None:
    """The end of a journal file that has a successor was fsynced at rotation: damage
    there is not a torn write, even with nothing after it in the same file."""
    crashed = await crashed_with_journal(tmp_path, entries=8)
    journal = only_journal(crashed)
    flip(journal, 7 * RECORD + RECORD_DAMAGE["payload"])
    # What a rotation leaves when the crash comes before the checkpoint is saved.
    number = list_journal_files(crashed.journal_path)[0]
    journal_file(crashed.journal_path, number + 1).touch()
    assert_names(await open_fails(crashed), journal, 7 * RECORD)


# -- (c) torn tail of the last journal file ------------------------------------------------


def tear_mid_record(settings: Settings, journal: Path, keep: int) -> None:
    """The crash came while the last record was being written, so its entry never reached
    the segment file either (segments are written after the journal's fsync)."""
    truncate(journal, 5 * RECORD + keep)
    segment = only_log_file(settings)
    truncate(segment, 5 * ENTRY)


def only_log_file(settings: Settings) -> Path:
    logs = sorted(settings.ledger_path.glob("*/*.log"))
    assert len(logs) == 1, logs
    return logs[0]


GARBAGE = random.Random(20240611).randbytes(3000)
TEARS: dict[str, Callable[[Settings, Path], object]] = {
    "cut in prefix": lambda s, j: tear_mid_record(s, j, keep=5),
    "cut in entry header": lambda s, j: tear_mid_record(s, j, keep=30),
    "cut in payload": lambda s, j: tear_mid_record(s, j, keep=RECORD - 1),
    "zeros appended": lambda s, j: j.write_bytes(j.read_bytes() + bytes(4096)),
    "garbage appended": lambda s, j: j.write_bytes(j.read_bytes() + GARBAGE),
}


@pytest.mark.parametrize("tear", TEARS)
async def test_torn_journal_tail_is_cut_and_the_rest_recovered(tmp_path: Path, tear: str) -> None:
    settings = settings_for(tmp_path / "live")
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        await append_range(engine, "p1", range(6))
        crashed = settings_for(snapshot(settings.data_dir, tmp_path / "crashed"))
    journal = only_journal(crashed)
    assert journal.stat().st_size == 6 * RECORD
    TEARS[tear](crashed, journal)
    kept = range(5) if tear.startswith("cut") else range(6)
    async with opened(crashed) as engine:
        assert engine.end_offset("p1") == len(kept) * COUNT
        assert shape(await read_all(engine, "p1")) == expected(kept)
        again = await engine.append("p1", payload(99), count=COUNT)
        assert again.base_offset == len(kept) * COUNT  # the torn offsets are reused: no gap
    async with opened(crashed) as engine:
        assert shape(await read_all(engine, "p1")) == [
            *expected(kept),
            (len(kept) * COUNT, COUNT, payload(99)),
        ]


async def test_a_cut_journal_tail_is_reported_with_its_bytes_and_offsets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged last record cannot be told from a torn write, so it is cut — but never
    silently: the log names the file, bytes and claimed offsets, and the engine counts it
    (issue 21, item 8)."""
    settings = settings_for(tmp_path / "live")
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        await append_range(engine, "p1", range(6))
        crashed = settings_for(snapshot(settings.data_dir, tmp_path / "crashed"))
    journal = only_journal(crashed)
    flip(journal, 5 * RECORD + RECORD - 3)  # the last acknowledged record's payload
    with caplog.at_level(logging.WARNING, logger="magnetar.storage.recovery"):
        async with opened(crashed) as engine:
            assert engine.stats.recovery_cut_records >= 1
            assert engine.stats.recovery_cut_bytes >= RECORD
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = warning.getMessage()
    assert str(journal) in text and f"cut {RECORD} bytes" in text
    assert f"offsets {5 * COUNT}..{6 * COUNT - 1}" in text


# -- (d) the open segment, below and above its checkpointed size -------------------------

SYNCED = 6  # entries fsynced by the checkpoint; 4 more are only in the journal's care


async def crashed_after_checkpoint(tmp_path: Path) -> tuple[Settings, Path]:
    settings = settings_for(tmp_path / "live")
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        await append_range(engine, "p1", range(SYNCED))
        await engine.checkpoint()
        await append_range(engine, "p1", range(SYNCED, 10))
        crashed = settings_for(snapshot(settings.data_dir, tmp_path / "crashed"))
        info = engine.segments("p1")[-1]
    assert (info.state, info.size) == (SegmentState.OPEN, 10 * ENTRY)
    return crashed, segment_path(crashed, info)


BELOW_SYNCED: dict[str, tuple[Damage, int]] = {
    "byte flipped": (lambda path: flip(path, 2 * ENTRY + 100), 2 * ENTRY),
    "cut inside an entry": (lambda path: truncate(path, 3 * ENTRY + 10), 3 * ENTRY),
    "cut between entries": (lambda path: truncate(path, 3 * ENTRY), 3 * ENTRY),
    "file missing": (lambda path: path.unlink(), 0),
}


@pytest.mark.parametrize("damage", BELOW_SYNCED)
async def test_open_segment_damaged_below_checkpoint_stops_open(
    tmp_path: Path, damage: str
) -> None:
    crashed, segment = await crashed_after_checkpoint(tmp_path)
    apply, position = BELOW_SYNCED[damage]
    apply(segment)
    assert_names(await open_fails(crashed), segment, position)


ABOVE_SYNCED: dict[str, Damage] = {
    "unsynced writes lost": lambda path: truncate(path, SYNCED * ENTRY),
    "torn entry": lambda path: truncate(path, 8 * ENTRY + 500),
    "byte flipped": lambda path: flip(path, 8 * ENTRY + 100),
    "zeros appended": lambda path: path.write_bytes(path.read_bytes() + bytes(512)),
}


@pytest.mark.parametrize("damage", ABOVE_SYNCED)
async def test_open_segment_tail_above_checkpoint_is_refilled_from_journal(
    tmp_path: Path, damage: str
) -> None:
    crashed, segment = await crashed_after_checkpoint(tmp_path)
    ABOVE_SYNCED[damage](segment)
    async with opened(crashed) as engine:
        assert engine.end_offset("p1") == 10 * COUNT
        assert shape(await read_all(engine, "p1")) == expected(range(10))
    assert segment.stat().st_size == 10 * ENTRY  # cut, then refilled: no junk in between
    async with opened(crashed) as engine:
        assert shape(await read_all(engine, "p1")) == expected(range(10))
