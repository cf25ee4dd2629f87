"""Upgrade a data directory from the storage engine's partitions to the managed ledger's
layout (issue 13).

Before: each topic partition is an engine partition named after it; the engine numbered its
offsets, rolled its segments and kept their records (:class:`SegmentInfo`) in its catalog.
After: each segment is a ledger of the :class:`LedgerStore` (engine partition ``L<segment
id>`` of records carrying entry ids 0, 1, 2, ...), and the partition's segment list lives at
:func:`~magnetar.ledger.writer.segment_list_path`, in the form the
:class:`~magnetar.ledger.writer.SegmentWriter` writes and reads, every segment placed
``{"local": true}`` (what :class:`~magnetar.ledger.local_segments.LocalSegments` gives).

What is kept: every segment id (the ledger part of a Pulsar message id) and offset (the
entry part is base offset − segment first offset), so every message id stays valid; each
entry's count, publish and event time, format and payload; the first retained offset; each
segment's record (state, times, offload details). The OPEN segment is recorded CLOSED at
its last entry (an empty one is left out: no message id names it; the writer's next
segment starts at the same offset). An OFFLOADED segment without its local copy is listed
with its record and gets no ledger. The segment id counter (``/ledgers/next-id``) is moved
past every upgraded id, so new segments get larger ids than the old ones.

Cost: one copy of the local data, and its disk space until each partition's old copy is
deleted (partitions are done one at a time, so the peak is the largest partition, plus its
journal records until a checkpoint retires them). The free space is checked before
anything is copied and before each partition: :class:`UpgradeSpaceError` if it cannot fit.

Nothing may append to the engine while this runs (the process that owns the directory
calls it at open, before it serves anything).

Crash safety: each step can be cut by a kill -9 and the next run finishes the job. A
partition is in one of these states, and a run moves it on from whichever it finds:

1. old partition only (possibly with ledgers ``L<id>`` of its segment ids, some complete,
   some partial from a cut copy): a complete ledger (entries 0..n-1, n as the segment
   record counts) is kept, a partial one deleted and copied again; then the engine is
   checkpointed (every copy durable) and only then the segment list is created;
2. segment list and old partition: the list is the truth; the old partition is deleted
   (its non-empty segments must all be in the list, else :class:`UpgradeConflictError`
   and nothing is deleted: another writer made that list);
3. segment list only: done; not seen again (:func:`needs_upgrade` lists old partitions).

A crash inside the engine's deletion of the old partition can leave its name without its
segment records: the engine reopens it empty (a new empty OPEN segment), which state 2
deletes again. A ledger ``L<id>`` of an old segment id whose entry 0 lies elsewhere than
that segment's first offset was not written by this upgrade: :class:`UpgradeConflictError`,
nothing deleted (ids of the new layout start above the old ones once this has run, so it
arises only when something wrote the new layout before the upgrade).

The counter is moved before any list is written, so a list never names an id that a new
segment could get again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from magnetar.ledger.errors import LedgerError
from magnetar.ledger.local_segments import LOCAL
from magnetar.ledger.writer import SEGMENT_IDS, segment_list_path
from magnetar.meta import MetadataStore
from magnetar.meta.counters import reserve_through
from magnetar.storage import SegmentInfo, SegmentState, StorageEngine
from magnetar.storage.errors import StorageError
from magnetar.storage.ledger_records import RECORD, Record
from magnetar.storage.ledger_store import LedgerStore, StoredLedger

log = logging.getLogger(__name__)

COPY_BATCH = 1000  # entries read from the old partition and appended together (group commit)
SPACE_MARGIN = 1 << 20  # bytes left free beyond the estimate


class UpgradeError(LedgerError):
    """The data directory could not be upgraded; it is left as it was, or part way with
    every entry in one layout or the other: fix the cause and run the upgrade again."""

    code = "ledger.upgrade"


class UpgradeSpaceError(UpgradeError):
    """The copy of a partition would not fit on its disk: free space, then run again."""

    code = "ledger.upgrade_space"


class UpgradeConflictError(UpgradeError):
    """A partition is in both layouts and its segment list lacks old segments: some writer
    made that list, so neither copy is touched. Resolve by hand (keep one of the two)."""

    code = "ledger.upgrade_conflict"


class StepKind(enum.StrEnum):
    COPIED = "copied"  # a batch of a segment's entries is stored (``entries`` so far)
    LEDGER = "ledger"  # the segment's copy is complete
    LISTED = "listed"  # the partition's segment list is written
    DELETED = "deleted"  # the old partition is gone


@dataclass(frozen=True, slots=True)
class UpgradeStep:
    """A step done, for progress reports and crash tests."""

    kind: StepKind
    partition: str
    segment_id: int = -1
    entries: int = 0


@dataclass(frozen=True, slots=True)
class PartitionUpgrade:
    """One partition upgraded: its segments listed, the entries and bytes copied in this
    run, and whether a previous run had already written its list (then nothing was copied,
    only the old partition deleted)."""

    name: str
    segments: int
    entries: int
    bytes: int
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class UpgradeReport:
    partitions: tuple[PartitionUpgrade, ...]
    seconds: float

    @property
    def entries(self) -> int:
        return sum(p.entries for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)


OnStep = Callable[[UpgradeStep], None]


def is_ledger_partition(name: str) -> bool:
    """Whether an engine partition is a ledger of the new layout (``L<digits>``)."""
    return name.startswith("L") and name[1:].isdigit()


def needs_upgrade(engine: StorageEngine) -> list[str]:
    """The engine partitions still in the old layout (read-only)."""
    return [name for name in engine.partitions() if not is_ledger_partition(name)]


async def upgrade(
    engine: StorageEngine,
    store: LedgerStore,
    meta: MetadataStore,
    *,
    batch: int = COPY_BATCH,
    on_step: OnStep | None = None,
) -> UpgradeReport:
    """Convert every old-layout partition of ``engine`` (see the module docstring).

    When this returns, every partition is in the new layout (durable) and its old copy
    deleted. If it raises, every entry is still in one layout or the other (a partition
    part way through is still old); running it again finishes the job.
    """
    started = time.monotonic()
    names = needs_upgrade(engine)
    if not names:
        return UpgradeReport((), 0.0)
    ids = [i.segment_id for name in names for i in engine.segments(name)]
    await reserve_through(meta, SEGMENT_IDS, max(ids, default=0))
    needs = [_copy_bytes(store, _listed_segments(engine, name)) for name in names]
    _check_space(engine, max(needs))
    log.info("upgrading %d partitions to the managed ledger's layout", len(names))
    step = on_step or (lambda _: None)
    done = tuple([await _upgrade_partition(engine, store, meta, n, batch, step) for n in names])
    report = UpgradeReport(done, time.monotonic() - started)
    log.info(
        "upgraded %d partitions (%d segments, %d entries, %.1f MiB copied) in %.1f s",
        len(done),
        sum(p.segments for p in done),
        report.entries,
        report.bytes / (1 << 20),
        report.seconds,
    )
    return report


def _listed_segments(engine: StorageEngine, name: str) -> list[SegmentInfo]:
    """The old partition's segments that go into its list: all but an empty OPEN one."""
    return [i for i in engine.segments(name) if not (i.state is SegmentState.OPEN and i.is_empty)]


async def _upgrade_partition(
    engine: StorageEngine,
    store: LedgerStore,
    meta: MetadataStore,
    name: str,
    batch: int,
    step: OnStep,
) -> PartitionUpgrade:
    infos = _listed_segments(engine, name)
    path = segment_list_path(name)
    listed = await meta.get(path)
    if listed is not None:  # state 2: a previous run wrote the list
        _check_listed(name, path, listed.value, infos)
        await engine.delete_partition(name)
        step(UpgradeStep(StepKind.DELETED, name))
        log.info("upgrading %s: listed by an earlier run, old copy deleted", name)
        return PartitionUpgrade(name, len(infos), 0, 0, resumed=True)
    _check_space(engine, _copy_bytes(store, infos))
    entries = size = 0
    for k, info in enumerate(infos, 1):
        log.info("upgrading %s: segment %d of %d, %d entries", name, k, len(infos), info.entries)
        if info.local and await _copy_segment(engine, store, name, info, batch, step):
            entries, size = entries + info.entries, size + info.size
    await engine.checkpoint()  # every copy durable before the list names it
    await meta.put(path, _segment_list(engine, name, infos), expected_version=-1)
    step(UpgradeStep(StepKind.LISTED, name))
    await engine.delete_partition(name)
    step(UpgradeStep(StepKind.DELETED, name))
    return PartitionUpgrade(name, len(infos), entries, size)


def _segment_list(engine: StorageEngine, name: str, infos: list[SegmentInfo]) -> bytes:
    """The segment list as SegmentWriter writes it, the OPEN segment closed at its end."""
    rows = []
    for info in infos:
        if info.state is SegmentState.OPEN:
            info = dataclasses.replace(
                info, state=SegmentState.CLOSED, closed_ms=engine.clock.now_ms()
            )
        rows.append({"info": dataclasses.asdict(info), **LOCAL})
    return json.dumps({"start": engine.start_offset(name), "ledgers": rows}).encode()


def _check_listed(name: str, path: str, body: bytes, infos: list[SegmentInfo]) -> None:
    listed = {raw["info"]["segment_id"] for raw in json.loads(body)["ledgers"]}
    missing = [i.segment_id for i in infos if i.segment_id not in listed]
    if missing:
        raise UpgradeConflictError(
            f"partition {name} is in both layouts: segments {missing} of the old partition "
            f"are not in its segment list {path}, which another writer made; nothing was "
            "deleted. Keep one copy (delete the other) and run the upgrade again"
        )


async def _copy_segment(
    engine: StorageEngine,
    store: LedgerStore,
    name: str,
    info: SegmentInfo,
    batch: int,
    step: OnStep,
) -> bool:
    """Copy one segment into its ledger; False if a previous run had copied it whole."""
    sid = info.segment_id
    held = store.ledger(sid)
    if held is not None:
        _check_ours(name, held, info)
        if _complete(held, info):
            log.info("upgrading %s: segment %d was copied by an earlier run", name, sid)
            await store.seal(sid)  # if that run stopped before it closed the file
            return False
        await store.delete(sid)  # cut short by a crash: copy it again from the start
    await store.create(sid)
    offset, eid = info.first_offset, 0
    while eid < info.entries:
        try:
            got = await engine.read(name, offset, max_entries=min(batch, info.entries - eid))
        except StorageError as e:
            raise UpgradeError(f"upgrading {name}: segment {sid} at offset {offset}: {e}") from e
        if not got or got[0].base_offset != offset:
            raise UpgradeError(
                f"upgrading {name}: segment {sid} holds {info.entries} entries by its "
                f"record, yet entry {eid} (offset {offset}) cannot be read"
            )
        # appended together so that one group commit stores the batch
        await asyncio.gather(*(store.add(sid, Record.of(eid + i, e)) for i, e in enumerate(got)))
        eid, offset = eid + len(got), got[-1].next_offset
        step(UpgradeStep(StepKind.COPIED, name, sid, eid))
    await store.seal(sid)  # every upgraded segment is closed: its file too
    step(UpgradeStep(StepKind.LEDGER, name, sid, eid))
    return True


def _check_ours(name: str, held: StoredLedger, info: SegmentInfo) -> None:
    """A ledger of the segment's id must be (part of) the upgrade's copy of it: its entry 0,
    if held, starts at the segment's first offset. Anything else is not ours to delete."""
    first = held.rows.get(0)
    if first is not None and first[1] != info.first_offset:
        raise UpgradeConflictError(
            f"upgrading {name}: ledger {info.segment_id} exists and is not a copy of segment "
            f"{info.segment_id} (its entry 0 is at offset {first[1]}, the segment starts at "
            f"{info.first_offset}); nothing was deleted. Was the directory written by the "
            "new layout before it was upgraded? Keep one copy and run the upgrade again"
        )


def _complete(held: StoredLedger, info: SegmentInfo) -> bool:
    return held.last_of_prefix == info.entries - 1 and len(held.ids) == info.entries


def _copy_bytes(store: LedgerStore, infos: list[SegmentInfo]) -> int:
    """Bytes the ledgers of ``infos`` still to be copied will take (records included)."""
    total = 0
    for info in infos:
        held = store.ledger(info.segment_id)
        if info.local and not (held is not None and _complete(held, info)):
            total += info.size + info.entries * RECORD.size
    return total


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def _check_space(engine: StorageEngine, need: int) -> None:
    """Refuse before copying ``need`` bytes of ledgers that would not fit: the segment
    files go to the ledger directory, their journal records (until a checkpoint retires
    them, at most ``journal_max_bytes``) to the journal directory; maybe the same disk."""
    if need == 0:
        return
    settings = engine.settings
    wants: dict[int, tuple[Path, int]] = {}
    journal = min(need, settings.journal_max_bytes)
    for path, n in ((settings.ledger_path, need), (settings.journal_path, journal)):
        device = os.stat(path).st_dev
        _, before = wants.get(device, (path, 0))
        wants[device] = (path, before + n)
    for path, n in wants.values():
        free = free_bytes(path)
        if free < n + SPACE_MARGIN:
            raise UpgradeSpaceError(
                f"upgrading the data directory needs about {_mib(n + SPACE_MARGIN)} free "
                f"on the disk of {path} for one copy of the largest partition, but only "
                f"{_mib(free)} is free: free some space and start again (nothing was changed "
                "by this step)"
            )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


__all__ = [
    "PartitionUpgrade",
    "StepKind",
    "UpgradeConflictError",
    "UpgradeError",
    "UpgradeReport",
    "UpgradeSpaceError",
    "UpgradeStep",
    "is_ledger_partition",
    "needs_upgrade",
    "upgrade",
]
