"""Faults from the disk and from the operator: full disks, failing fsyncs, bad settings.

Disk faults are injected at the system-call boundary: ``os.writev``, ``os.write`` and
``os.fsync`` fail with a chosen errno for files whose path ends with a chosen suffix, as
a full or failing disk would, and pass through untouched otherwise. Everything else is
real: files, fsyncs, the SQLite metadata store.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from magnetar.core.config import Settings, build_settings
from magnetar.core.errors import ConfigError
from magnetar.meta import open_metadata_store
from magnetar.storage import (
    DiskFullError,
    Entry,
    StorageEngine,
    StorageError,
    StorageSettings,
    WriteFailedError,
)
from magnetar.storage.catalog import partition_dir
from magnetar.storage.journal import list_journal_files
from magnetar.storage.segment import segment_file

NO_HANG_S = 5.0  # an append that takes longer than this is stuck, not slow


class FailingDisk:
    """Makes chosen system calls fail for chosen files, like a full or failing disk."""

    CALLS = ("write", "writev", "fsync")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._rules: dict[str, tuple[str, int]] = {}  # call -> (path suffix, errno)
        self._short_writes = ""  # path suffix whose writev stores only half its bytes
        self.failures = 0
        for call in self.CALLS:
            monkeypatch.setattr(os, call, self._faulty(call, getattr(os, call)))

    def fail(self, call: str, suffix: str, error: int) -> None:
        """From now on, ``os.<call>`` on a file whose path ends with ``suffix`` fails."""
        assert call in self.CALLS
        self._rules[call] = (suffix, error)

    def fill_up(self, suffix: str) -> None:
        """The disk fills up part-way through each write to ``suffix`` files, as Linux
        reports it: ``writev`` stores half its bytes and returns the short count, and the
        ``write`` that would finish the job fails with ENOSPC."""
        self._short_writes = suffix
        self.fail("write", suffix, errno.ENOSPC)

    def heal(self) -> None:
        self._rules.clear()
        self._short_writes = ""

    def _faulty(self, call: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(fd: int, *args: Any) -> Any:
            rule = self._rules.get(call)
            if rule is not None and _path_of(fd).endswith(rule[0]):
                self.failures += 1
                raise OSError(rule[1], os.strerror(rule[1]))
            if (
                call == "writev"
                and self._short_writes
                and _path_of(fd).endswith(self._short_writes)
            ):
                self.failures += 1
                data = b"".join(args[0])
                return real(fd, [data[: len(data) // 2]])
            return real(fd, *args)

        return faulty


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FailingDisk:
    return FailingDisk(monkeypatch)


def settings_for(data_dir: Path, **overrides: object) -> Settings:
    return build_settings(env={}, overrides={"data_dir": data_dir, **overrides})


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


def payload(i: int, size: int = 1000) -> bytes:
    return hashlib.shake_256(i.to_bytes(4, "big")).digest(size)


async def read_all(engine: StorageEngine, name: str) -> list[Entry]:
    out: list[Entry] = []
    offset = engine.start_offset(name)
    while offset < engine.end_offset(name):
        batch = await engine.read(name, offset)
        out += batch
        offset = batch[-1].next_offset
    return out


def shape(entries: list[Entry]) -> list[tuple[int, int, bytes]]:
    return [(e.base_offset, e.count, e.payload) for e in entries]


def assert_continuous(entries: list[Entry]) -> None:
    offsets = [(e.base_offset, e.next_offset) for e in entries]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(offsets)), offsets
    assert not entries or entries[0].base_offset == 0


# -- (a, b) a failed append leaves nothing behind ------------------------------------------

Inject = Callable[[FailingDisk], None]


def failing(call: str, suffix: str, error: int) -> Inject:
    return lambda disk: disk.fail(call, suffix, error)


def filling_up(suffix: str) -> Inject:
    return lambda disk: disk.fill_up(suffix)


APPEND_FAULTS = [
    pytest.param(
        failing("writev", ".journal", errno.ENOSPC),
        errno.ENOSPC,
        DiskFullError,
        id="journal-write-ENOSPC",
    ),
    pytest.param(
        failing("writev", ".journal", errno.EDQUOT),
        errno.EDQUOT,
        DiskFullError,
        id="journal-write-EDQUOT",
    ),
    pytest.param(
        filling_up(".journal"), errno.ENOSPC, DiskFullError, id="journal-short-write-then-ENOSPC"
    ),
    pytest.param(
        failing("writev", ".log", errno.ENOSPC),
        errno.ENOSPC,
        DiskFullError,
        id="segment-write-ENOSPC",
    ),
    pytest.param(
        filling_up(".log"), errno.ENOSPC, DiskFullError, id="segment-short-write-then-ENOSPC"
    ),
    pytest.param(
        failing("writev", ".journal", errno.EIO),
        errno.EIO,
        WriteFailedError,
        id="journal-write-EIO",
    ),
    pytest.param(
        failing("fsync", ".journal", errno.EIO), errno.EIO, WriteFailedError, id="journal-fsync-EIO"
    ),
]
PARTS = ("p1", "p2")


@pytest.mark.parametrize(("inject", "error", "raised"), APPEND_FAULTS)
async def test_failed_appends_are_not_acknowledged_and_leave_no_gap(
    tmp_path: Path,
    disk: FailingDisk,
    inject: Inject,
    error: int,
    raised: type[StorageError],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = settings_for(tmp_path)
    async with opened(settings) as engine:
        for name in PARTS:
            await engine.create_partition(name)
        acked = [await engine.append(PARTS[i % 2], payload(i), count=3) for i in range(6)]
        ends = {name: engine.end_offset(name) for name in PARTS}

        inject(disk)
        failed = await asyncio.gather(
            *(engine.append(PARTS[i % 2], payload(100 + i), count=3) for i in range(4)),
            return_exceptions=True,
        )
        assert disk.failures > 0, "the fault never fired"
        for outcome in failed:
            assert isinstance(outcome, raised), repr(outcome)
            _assert_tells_what_happened(outcome, error)
        assert {name: engine.end_offset(name) for name in PARTS} == ends
        for name in PARTS:
            assert shape(await read_all(engine, name)) == shape(acked[PARTS.index(name) :: 2])
        full = raised is DiskFullError
        # A disk-full episode is logged once, with the free space, and shows in the stats.
        assert engine.stats.disk_full is full
        assert engine.stats.disk_full_episodes == int(full)
        episodes = [r for r in caplog.records if "disk full" in r.getMessage()]
        assert len(episodes) == int(full)
        assert all("free" in r.getMessage() for r in episodes)

        disk.heal()
        acked += [await engine.append(PARTS[i % 2], payload(i), count=3) for i in range(6, 10)]
        assert not engine.stats.disk_full
        reused = [ends["p1"], ends["p2"], ends["p1"] + 3, ends["p2"] + 3]
        assert [e.base_offset for e in acked[6:]] == reused  # the failed offsets, no gap
        await _assert_holds_exactly(engine, acked)
        crashed = _power_cut_copy(engine, tmp_path / "crashed")
    async with opened(settings) as engine:  # the failed entries did not come back
        await _assert_holds_exactly(engine, acked)
    async with opened(crashed) as engine:  # nor did they in the journal, which rebuilt all
        await _assert_holds_exactly(engine, acked)


def _power_cut_copy(engine: StorageEngine, dst: Path) -> Settings:
    """Copy the live data directory (what a crash would leave), then empty the copy's
    open segment files: nothing in them was fsynced, so a power cut may take all of it,
    and recovery has only the journal to rebuild them from."""
    assert engine.stats.checkpoints == 0 and engine.stats.rolls == 0, engine.stats
    data_dir = engine.settings.journal_path.parent  # journal, ledgers and metadata.db sit in it
    shutil.copytree(data_dir, dst, ignore=shutil.ignore_patterns("*-shm"))
    crashed = settings_for(dst)
    for name in engine.partitions():
        info = engine.segments(name)[-1]
        os.truncate(
            segment_file(
                partition_dir(StorageSettings.of(crashed), info.partition_id), info.segment_id
            ),
            0,
        )
    return crashed


def _assert_tells_what_happened(error: StorageError, errno_value: int) -> None:
    assert error.retriable
    message = str(error)
    assert os.strerror(errno_value) in message, message
    if isinstance(error, DiskFullError):
        assert "disk is full" in message and "free space" in message, message


async def _assert_holds_exactly(engine: StorageEngine, acked: list[Entry]) -> None:
    for name in PARTS:
        stored = await read_all(engine, name)
        assert_continuous(stored)
        assert shape(stored) == shape(acked[PARTS.index(name) :: 2])


# -- a fault during a roll or checkpoint must not wedge the engine ------------------------

MAINTENANCE_FAULTS = [
    pytest.param(
        "write", ".index.tmp", errno.ENOSPC, {"segment_max_bytes": 4096}, id="roll-index-ENOSPC"
    ),
    pytest.param(
        "fsync", ".log", errno.ENOSPC, {"journal_max_bytes": 4096}, id="checkpoint-fsync-ENOSPC"
    ),
]


@pytest.mark.parametrize(("call", "suffix", "error", "limits"), MAINTENANCE_FAULTS)
async def test_disk_full_during_maintenance_fails_appends_instead_of_hanging(
    tmp_path: Path,
    disk: FailingDisk,
    call: str,
    suffix: str,
    error: int,
    limits: dict[str, int],
) -> None:
    """The disk fills up while the flusher rolls a segment or checkpoints, right after it
    acknowledged a batch. Appends meanwhile may fail (DiskFullError: retriable), but must
    never hang; once space is freed they succeed, and nothing acknowledged is lost."""
    settings = settings_for(tmp_path, **limits)
    acked: list[Entry] = []
    async with opened(settings) as engine:
        await engine.create_partition("p1")
        disk.fail(call, suffix, error)
        for i in range(12):  # 12 KB: past either limit
            with contextlib.suppress(DiskFullError):  # allowed while the disk is full
                acked.append(await _bounded(engine.append("p1", payload(i), count=1)))
        assert disk.failures > 0, "the fault never fired"
        disk.heal()
        for i in range(12, 16):
            acked.append(await _bounded(engine.append("p1", payload(i), count=1)))
        _assert_offsets_continuous(acked)
    async with opened(settings) as engine:
        assert shape(await read_all(engine, "p1")) == shape(acked)


async def _bounded(append: Awaitable[Entry]) -> Entry:
    try:
        async with asyncio.timeout(NO_HANG_S):
            return await append
    except TimeoutError:
        raise AssertionError(
            f"append did not complete within {NO_HANG_S} s: the engine is wedged"
        ) from None


def _assert_offsets_continuous(acked: list[Entry]) -> None:
    assert [e.base_offset for e in acked] == list(range(len(acked)))


# -- (c) bad settings ----------------------------------------------------------------------

BAD_SETTINGS = [
    pytest.param({"segment_max_bytes": -1}, "segment_max_bytes", id="negative-segment-size"),
    pytest.param({"segment_max_bytes": 0}, "segment_max_bytes", id="zero-segment-size"),
    pytest.param({"segment_max_bytes": "lots"}, "segment_max_bytes", id="non-numeric-size"),
    pytest.param({"journal_max_bytes": -4096}, "journal_max_bytes", id="negative-journal-size"),
    pytest.param({"segment_max_age": -1.0}, "segment_max_age", id="negative-segment-age"),
    pytest.param({"fsync": "sometimes"}, "fsync", id="unknown-fsync-policy"),
    pytest.param({"fsync": "interval:0"}, "fsync", id="zero-fsync-interval"),
]


@pytest.mark.parametrize(("overrides", "setting"), BAD_SETTINGS)
def test_bad_setting_is_refused_naming_it(
    tmp_path: Path, overrides: dict[str, object], setting: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        build_settings(env={}, overrides={"data_dir": tmp_path, **overrides})
    assert caught.value.setting == setting
    assert repr(setting) in str(caught.value)


def test_bad_setting_from_the_environment_is_refused_naming_it(tmp_path: Path) -> None:
    env = {"MAGNETAR_SEGMENT_MAX_BYTES": "-1", "MAGNETAR_DATA_DIR": str(tmp_path)}
    with pytest.raises(ConfigError) as caught:
        build_settings(env=env)
    assert caught.value.setting == "segment_max_bytes"
    assert "'segment_max_bytes'" in str(caught.value) and "-1" in str(caught.value)


@pytest.mark.parametrize("setting", ["journal_dir", "ledger_dir"])
@pytest.mark.parametrize("place", ["under-a-file", "is-a-file"])
async def test_unwritable_directory_is_refused_at_open(
    tmp_path: Path, setting: str, place: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    target = blocker / "storage" if place == "under-a-file" else blocker
    settings = settings_for(tmp_path / "data", **{setting: target})
    meta = open_metadata_store(settings.metadata)
    try:
        with pytest.raises(ConfigError) as caught:
            engine = await StorageEngine.open(StorageSettings.of(settings), meta)
            await engine.aclose()
    finally:
        await meta.aclose()
    assert caught.value.setting == setting
    message = str(caught.value)
    assert repr(setting) in message and str(target) in message and "not writable" in message
    assert blocker.read_bytes() == b"not a directory"


# -- (d) journal rotation ------------------------------------------------------------------

JOURNAL_MAX = 16 * 1024
RECORD = 8 + 40 + 1000  # journal record of a 1000-byte payload


def _journal_bytes(directory: Path) -> int:
    total = 0
    for path in directory.glob("*.journal"):
        with contextlib.suppress(FileNotFoundError):  # a checkpoint may delete it meanwhile
            total += path.stat().st_size
    return total


async def test_journal_rotates_and_checkpointed_files_are_deleted(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, journal_max_bytes=JOURNAL_MAX, segment_max_bytes=64 * 1024)
    journal_dir = settings.journal_path
    seen: set[int] = set()
    most_files = most_bytes = 0
    acked: list[Entry] = []
    async with opened(settings) as engine:
        for name in PARTS:
            await engine.create_partition(name)
        for i in range(300):  # ~300 KiB of records: about 19 journal files' worth
            acked.append(await engine.append(PARTS[i % 2], payload(i)))
            numbers = list_journal_files(journal_dir)
            seen.update(numbers)
            most_files = max(most_files, len(numbers))
            most_bytes = max(most_bytes, _journal_bytes(journal_dir))
        assert engine.stats.checkpoints >= 15
        assert engine.stats.journal_files_removed >= 15
    assert len(seen) >= 15, f"journal files seen: {sorted(seen)}"
    assert most_files <= 2, "checkpointed journal files were not deleted"
    assert most_bytes <= JOURNAL_MAX + RECORD
    remaining = list_journal_files(journal_dir)
    assert len(remaining) == 1 and remaining[0] >= max(seen)
    async with opened(settings) as engine:
        await _assert_holds_exactly(engine, acked)
        assert list_journal_files(journal_dir) == [remaining[0] + 1]


# -- (e) journal and ledgers on their own directories --------------------------------------


def _split_settings(root: Path) -> Settings:
    return settings_for(
        root / "data",
        journal_dir=root / "disk-a" / "journal",
        ledger_dir=root / "disk-b" / "ledgers",
        segment_max_bytes=8 * 1024,
    )


async def test_journal_and_ledgers_on_separate_directories(tmp_path: Path) -> None:
    settings = _split_settings(tmp_path / "live")
    async with opened(settings) as engine:
        for name in PARTS:
            await engine.create_partition(name)
        acked = [await engine.append(PARTS[i % 2], payload(i), count=2) for i in range(40)]
        assert engine.stats.rolls > 0
        # A crash now: the open segments' contents are only covered by the journal.
        crashed = _split_settings(tmp_path / "crashed")
        for part in ("data", "disk-a", "disk-b"):
            shutil.copytree(tmp_path / "live" / part, tmp_path / "crashed" / part)
        open_segments = [engine.segments(name)[-1] for name in PARTS]
    data_files = {p.name for p in settings.data_dir.iterdir()}
    assert all(name.startswith("metadata.db") for name in data_files), data_files
    assert list_journal_files(settings.journal_path)
    assert list(settings.ledger_path.glob("*/*.log"))
    async with opened(settings) as engine:
        await _assert_holds_exactly(engine, acked)

    # Lose every unsynced byte of the open segments: replay must refill them from the
    # journal on its own directory.
    for info in open_segments:
        path = segment_file(
            partition_dir(StorageSettings.of(crashed), info.partition_id), info.segment_id
        )
        assert path.stat().st_size > 0
        path.write_bytes(b"")
    async with opened(crashed) as engine:
        await _assert_holds_exactly(engine, acked)
