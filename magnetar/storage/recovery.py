"""Start-up recovery: bring segment files back in line with the journal.

1. Each partition's OPEN segment is scanned and cut after its last valid entry. If the
   cut falls below the size the last checkpoint fsynced, acknowledged data is damaged:
   :class:`CorruptionError`, naming the file and position.
2. The journal is replayed from the checkpoint: records already in a segment are skipped,
   the rest are appended. A record that would leave a gap in a partition's offsets means
   lost acknowledged data: CorruptionError again. A torn tail of the last journal file is
   an unacknowledged write and is cut (see :func:`journal.replay`).
3. Open segments are fsynced, a new journal file is started, a checkpoint is written and
   the replayed journal files are deleted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.core.clock import Clock
from magnetar.meta import MetadataStore
from magnetar.storage import catalog
from magnetar.storage.config import StorageSettings
from magnetar.storage.errors import CorruptionError
from magnetar.storage.fileio import writev_all
from magnetar.storage.journal import (
    Journal,
    JournalRecord,
    TornTail,
    journal_file,
    list_journal_files,
    remove_before,
)
from magnetar.storage.journal import replay as replay_journal
from magnetar.storage.open_files import OpenFiles
from magnetar.storage.partition import PartitionLog
from magnetar.storage.records import ENTRY_HEADER_SIZE, claimed_range, encode_header
from magnetar.storage.segment import SegmentState, scan_valid_prefix
from magnetar.storage.tail_cache import CacheBudget

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Recovered:
    partitions: list[PartitionLog]
    journal: Journal
    replayed: int
    cut: list[TornTail] = field(default_factory=list)  # torn tails cut off (logged)


async def recover(
    settings: StorageSettings,
    meta: MetadataStore,
    clock: Clock,
    budget: CacheBudget,
    files: OpenFiles,
) -> Recovered:
    checkpoint = await catalog.load_checkpoint(meta, settings.journal_path)
    existing = list_journal_files(settings.journal_path)
    if checkpoint is None:
        checkpoint = catalog.Checkpoint(existing[0] if existing else 1, 0, {})
    parts = await catalog.load_partitions(meta, settings, budget, files)
    cut: list[TornTail] = []
    for part in parts:
        await _abandon_offloads(meta, part)
        await _open_last_segment(meta, settings, part, checkpoint, clock, cut.append)
    by_id = {p.partition_id: p for p in parts}
    replayed = 0
    journal_cut: list[TornTail] = []
    records = replay_journal(
        settings.journal_path, checkpoint.journal, checkpoint.position, journal_cut.append
    )
    for record in records:
        owner = by_id.get(record.partition_id)  # None: the partition was deleted since
        if owner is not None and _apply(owner, record, settings):
            replayed += 1
    synced = {}
    for part in parts:
        seg = part.open_segment
        with seg.writing() as fd:
            os.fsync(fd)
        synced[seg.info.segment_id] = seg.info.size
    number = max([checkpoint.journal, *existing]) + 1
    journal = Journal(settings.journal_path, number)
    catalog.save_checkpoint(settings.journal_path, number, 0, synced)
    await catalog.forget_legacy_checkpoint(meta)
    remove_before(settings.journal_path, number)
    for tail in journal_cut:
        # The journal is the last word: a cut here is a write never acknowledged — unless
        # the power failed and damaged the last acknowledged record, which looks the same.
        log.warning(
            "recovery %s of the journal: an unfinished write, or the last acknowledged "
            "record damaged by a power loss",
            tail.describe(),
        )
    return Recovered(parts, journal, replayed, cut + journal_cut)


async def _open_last_segment(
    meta: MetadataStore,
    settings: StorageSettings,
    part: PartitionLog,
    checkpoint: catalog.Checkpoint,
    clock: Clock,
    on_cut: Callable[[TornTail], None],
) -> None:
    last = part.segments[-1] if part.segments else None
    if last is None or last.info.state is not SegmentState.OPEN:
        # Crashed between closing a segment and opening the next (or never opened one).
        part.next_offset = part.end_offset = last.info.end_offset if last else 0
        await catalog.new_segment(meta, settings, part, clock)
        return
    entries, valid, reason = scan_valid_prefix(last.path)
    synced = checkpoint.synced.get(last.info.segment_id, 0)
    if valid < synced:
        raise CorruptionError(str(last.path), valid, reason or "file shorter than checkpointed")
    size = last.path.stat().st_size
    if size > valid:  # the journal replays what was acknowledged of it
        with open(last.path, "rb") as f:
            f.seek(valid)
            claimed = claimed_range(f.read(ENTRY_HEADER_SIZE), 0, 0)
        tail = TornTail(last.path, valid, size - valid, claimed)
        log.info(
            "recovery %s of %s; the journal restores what was acknowledged",
            tail.describe(),
            part.name,
        )
        on_cut(tail)
    with open(last.path, "ab") as f:
        f.truncate(valid)
    info = last.info
    info.entries, info.size, info.end_offset = 0, 0, info.first_offset
    last.open_for_append()
    for pos, entry in entries:
        last.on_appended(entry, pos)
    part.next_offset = part.end_offset = info.end_offset


async def _abandon_offloads(meta: MetadataStore, part: PartitionLog) -> None:
    """An offload interrupted by a crash never finished: the local copy is still the truth.
    The offload details (the tier's record of its attempts) stay, so that the ledger can
    find and delete what the cut-off attempt wrote."""
    for seg in part.segments:
        if seg.info.state is SegmentState.OFFLOADING:
            seg.info.state = SegmentState.CLOSED
            await catalog.save_segment(meta, seg)


def _apply(part: PartitionLog, record: JournalRecord, settings: StorageSettings) -> bool:
    """Append ``record`` to its partition unless a segment already holds it."""
    entry = record.entry
    if entry.next_offset <= part.next_offset:
        return False
    if entry.base_offset != part.next_offset:
        raise CorruptionError(
            str(journal_file(settings.journal_path, record.number)),
            record.position,
            f"journal record for {part.name} starts at offset {entry.base_offset} but the "
            f"partition ends at {part.next_offset}: acknowledged entries are missing",
        )
    seg = part.open_segment
    header = encode_header(
        entry.base_offset,
        entry.count,
        entry.publish_time,
        entry.event_time,
        entry.format,
        entry.payload,
    )
    pos = seg.info.size
    with seg.writing() as fd:
        writev_all(fd, [header, entry.payload])
    seg.on_appended(entry, pos)
    part.next_offset = part.end_offset = entry.next_offset
    return True
