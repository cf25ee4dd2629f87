"""Crash safety: SIGKILL a process that is appending, again and again, and check recovery.

A child process (tests/storage/crash_child.py) appends concurrently to three partitions
with fsync=always, 64 KiB segments and 256 KiB journal files, so segment rolls, journal
rotations and checkpoints all happen while it runs, and logs every acknowledged append to
a side file. The parent kills it at a random moment, then recovers a copy of the data
directory in-process and checks every round's acknowledgements against it. The original
directory is left crashed, so the next child starts with a real recovery too.

A SIGKILL keeps the page cache, so segment files keep even what was never fsynced and
journal replay is rarely needed (and a torn write is rarer still). Every other round
therefore also plays a power cut on the copy: each open segment keeps only a random
prefix of its bytes above the size the last checkpoint fsynced, so recovery must cut a
torn entry and refill the rest from the journal (which fsync=always made durable before
every acknowledgement).

Each round's seed fixes the payloads and the kill delay (the child's progress at that
moment still depends on scheduling). Rerun a failing seed with MAGNETAR_CRASH_SEED.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.core.errors import MagnetarError
from magnetar.meta import open_metadata_store
from magnetar.storage import SegmentState, StorageEngine, StorageSettings, catalog
from magnetar.storage.open_files import OpenFiles
from magnetar.storage.tail_cache import CacheBudget
from magnetar.testing.processes import PythonChild
from tests.storage.crash_child import (
    PARTITIONS,
    READY,
    Intent,
    SideLog,
    crash_settings,
    digest_of,
)

pytestmark = pytest.mark.slow

ROUNDS = int(os.environ.get("MAGNETAR_CRASH_ROUNDS", "20"))
BASE_SEED = int(os.environ.get("MAGNETAR_CRASH_SEED", "20240611"))
READY_TIMEOUT_S = 30.0
KILL_DELAY_S = (0.05, 0.6)


@dataclass(frozen=True, slots=True)
class Stored:
    """What the verifier found at one offset."""

    count: int
    ident: int
    digest: str


Contents = dict[str, dict[int, Stored]]  # partition -> base offset -> entry


async def test_acknowledged_appends_survive_repeated_sigkill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    side_files: list[Path] = []
    previous: Contents = {name: {} for name in PARTITIONS}
    dropped = 0
    for round_no in range(ROUNDS):
        seed = BASE_SEED + round_no
        context = f"round {round_no}, seed {seed} (MAGNETAR_CRASH_SEED={BASE_SEED})"
        side_files.append(tmp_path / f"side-{round_no:02d}.txt")
        delay = random.Random(seed).uniform(*KILL_DELAY_S)
        await _run_and_kill(data_dir, side_files[-1], seed, round_no, delay, context)
        copy = tmp_path / "recovered"
        shutil.copytree(data_dir, copy)
        if round_no % 2:
            dropped += await _lose_unsynced_segment_bytes(copy, random.Random(f"cut/{seed}"))
        logs = [SideLog.read(path) for path in side_files]
        try:
            previous = await _verify(copy, logs, previous, context)
        except MagnetarError as e:  # give the error the seed, and keep the copy to look at
            raise AssertionError(f"{context}: recovering {copy} failed: {e!r}") from e
        shutil.rmtree(copy)
    logs = [SideLog.read(path) for path in side_files]
    await _verify(data_dir, logs, previous, f"final check in place (seed {BASE_SEED})")
    _assert_the_run_exercised_the_engine(logs, previous)
    assert dropped > 0, "no power cut dropped segment bytes: journal replay went untested"


async def _run_and_kill(
    data_dir: Path, side_file: Path, seed: int, round_no: int, delay: float, context: str
) -> None:
    stderr = side_file.with_suffix(".stderr")
    args = (str(data_dir), str(side_file), str(seed), str(round_no))
    child = await PythonChild.start("tests.storage.crash_child", *args, stderr_path=stderr)
    async with child:
        await child.wait_for_line(READY, timeout=READY_TIMEOUT_S)
        # A random kill moment is the point of the test; nothing waits on this sleep.
        await asyncio.sleep(delay)
        code = await child.kill()
        if code != -signal.SIGKILL:
            raise child.failure(f"ended on its own before the kill ({context})")


async def _lose_unsynced_segment_bytes(data_dir: Path, rng: random.Random) -> int:
    """Cut every OPEN segment file to a random size between the size the last checkpoint
    fsynced (0 if the segment is younger) and its full size, as a power cut may: only a
    prefix of what was written since the last fsync survives. Returns the bytes dropped."""
    settings = crash_settings(data_dir)
    meta = open_metadata_store(settings.metadata)
    try:
        checkpoint = await catalog.load_checkpoint(meta, settings.journal_path)
        partitions = await catalog.load_partitions(meta, settings, CacheBudget(0), OpenFiles(64))
    finally:
        await meta.aclose()
    synced = checkpoint.synced if checkpoint is not None else {}
    dropped = 0
    for part in partitions:
        for segment in part.segments:
            if segment.info.state is SegmentState.OPEN and segment.path.exists():
                size = segment.path.stat().st_size
                keep = rng.randint(min(synced.get(segment.info.segment_id, 0), size), size)
                if size > keep:
                    os.truncate(segment.path, keep)
                    dropped += size - keep
    return dropped


async def _verify(
    data_dir: Path, logs: list[SideLog], previous: Contents, context: str
) -> Contents:
    """Recover ``data_dir`` and check it against every side log; returns what it holds."""
    settings = crash_settings(data_dir)
    meta = open_metadata_store(settings.metadata)
    try:
        engine = await StorageEngine.open(StorageSettings.of(settings), meta)
        try:
            contents = {name: await _read_all(engine, name, context) for name in PARTITIONS}
        finally:
            await engine.aclose()
    finally:
        await meta.aclose()
    intents: dict[int, Intent] = {}
    for log in logs:
        intents.update(log.intents)
    _check_acknowledged(contents, logs, context)
    _check_nothing_invented(contents, intents, context)
    _check_nothing_rolled_back(contents, previous, context)
    return contents


async def _read_all(engine: StorageEngine, name: str, context: str) -> dict[int, Stored]:
    """Walk the partition entry by entry: offsets continuous from 0, every entry whole."""
    assert engine.start_offset(name) == 0, f"{context}: {name} lost its first offsets"
    end = engine.end_offset(name)
    stored: dict[int, Stored] = {}
    offset = 0
    while offset < end:
        batch = await engine.read(name, offset, max_entries=500)
        assert batch, f"{context}: {name} read nothing at {offset}, before its end {end}"
        for entry in batch:
            assert entry.base_offset == offset, (
                f"{context}: {name} has a gap or overlap: the entry after offset {offset} "
                f"starts at {entry.base_offset}"
            )
            assert entry.count >= 1, f"{context}: {name} entry at {offset} has no messages"
            stored[offset] = Stored(entry.count, entry.event_time, digest_of(entry.payload))
            offset = entry.next_offset
    assert offset == end, f"{context}: {name} entries end at {offset}, end_offset says {end}"
    assert await engine.read(name, end) == [], f"{context}: {name} reads past its end {end}"
    return stored


def _check_acknowledged(contents: Contents, logs: list[SideLog], context: str) -> None:
    for round_no, log in enumerate(logs):
        for ack in log.acks:
            found = contents[ack.partition].get(ack.base_offset)
            assert found == Stored(ack.count, ack.ident, ack.digest), (
                f"{context}: acknowledged entry {ack} of round {round_no} reads back as {found}"
            )


def _check_nothing_invented(contents: Contents, intents: dict[int, Intent], context: str) -> None:
    """Every stored entry is one a child asked to append (acknowledged or not), once."""
    seen: set[int] = set()
    for name, stored in contents.items():
        for offset, entry in stored.items():
            wanted = intents.get(entry.ident)
            assert wanted == Intent(name, entry.count, entry.digest), (
                f"{context}: {name} offset {offset} holds {entry}, which no child appended "
                f"as such (intent: {wanted})"
            )
            assert entry.ident not in seen, f"{context}: entry {entry} is stored twice"
            seen.add(entry.ident)


def _check_nothing_rolled_back(current: Contents, previous: Contents, context: str) -> None:
    """What an earlier recovery exposed (even unacknowledged) stays, unchanged."""
    for name, before in previous.items():
        after = current[name]
        changed = [off for off, entry in before.items() if after.get(off) != entry]
        assert not changed, (
            f"{context}: {name} entries at offsets {changed[:5]} changed or vanished since "
            "the previous recovery"
        )


def _assert_the_run_exercised_the_engine(logs: list[SideLog], contents: Contents) -> None:
    acks = sum(len(log.acks) for log in logs)
    rolls = sum(log.rolls for log in logs)
    checkpoints = sum(log.checkpoints for log in logs)
    assert acks >= 20 * len(logs), f"only {acks} acknowledged appends in {len(logs)} rounds"
    assert rolls > 0, "no segment rolled while children ran: the test missed that path"
    assert checkpoints > 0, "no journal checkpoint while children ran: test missed that path"
    for name, stored in contents.items():
        assert len(stored) > 0, f"{name} never received an entry"
