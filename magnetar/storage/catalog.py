"""Where the storage engine keeps its metadata, all of it through the MetadataStore.

    /storage/partitions/<quoted name>   {"id": n, "name": ...}
    /storage/segments/<pid>/<sid>       SegmentInfo (JSON)
    /storage/counters/<kind>            last id handed out

and, node-local, beside the journal it describes (never in shared metadata):

    <journal dir>/checkpoint.json       {"journal": n, "position": p, "synced": {sid: size}}

A checkpoint says: every journal record before (journal, position) is in a segment file,
and each listed open segment was fsynced up to the given size. Data directories written
before the file existed kept it at ``/storage/checkpoint`` in the metadata store: it is read
from there once, and removed after the first checkpoint is in the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from magnetar.core.clock import Clock
from magnetar.meta import BadVersionError, MetadataStore, NodeExistsError
from magnetar.storage.config import StorageSettings
from magnetar.storage.fileio import fsync_dir
from magnetar.storage.open_files import OpenFiles
from magnetar.storage.partition import PartitionLog
from magnetar.storage.segment import Segment, SegmentInfo, SegmentState
from magnetar.storage.tail_cache import CacheBudget, TailCache

ROOT = "/storage"
CHECKPOINT_FILE = "checkpoint.json"
LEGACY_CHECKPOINT = f"{ROOT}/checkpoint"  # where data directories before the file kept it


@dataclass(frozen=True, slots=True)
class Checkpoint:
    journal: int
    position: int
    synced: dict[int, int]


def partition_path(name: str) -> str:
    return f"{ROOT}/partitions/{quote(name, safe='')}"


def segments_path(partition_id: int) -> str:
    return f"{ROOT}/segments/{partition_id:010d}"


def segment_path(info: SegmentInfo) -> str:
    return f"{segments_path(info.partition_id)}/{info.segment_id:020d}"


def partition_dir(settings: StorageSettings, partition_id: int) -> Path:
    return settings.ledger_path / f"{partition_id:010d}"


async def next_id(meta: MetadataStore, kind: str) -> int:
    """Hand out the next id of ``kind`` (1, 2, ...), safely under concurrent callers."""
    path = f"{ROOT}/counters/{kind}"
    while True:
        current = await meta.get(path)
        value = int(current.value) + 1 if current else 1
        expected = current.stat.version if current else -1
        try:
            await meta.put(path, str(value).encode(), expected_version=expected)
        except (BadVersionError, NodeExistsError):
            continue  # another writer took this id first: read again
        return value


async def create_partition(
    meta: MetadataStore, settings: StorageSettings, name: str, cache: TailCache, files: OpenFiles
) -> PartitionLog:
    """Register a partition and make its directory. Durable when this returns."""
    pid = await next_id(meta, "partition")
    directory = partition_dir(settings, pid)
    directory.mkdir(parents=True, exist_ok=True)
    fsync_dir(settings.ledger_path)
    body = json.dumps({"id": pid, "name": name}).encode()
    await meta.put(partition_path(name), body, expected_version=-1)
    return PartitionLog(name, pid, directory, cache, files)


async def load_partitions(
    meta: MetadataStore, settings: StorageSettings, budget: CacheBudget, files: OpenFiles
) -> list[PartitionLog]:
    """Every registered partition with its segments (files not yet opened)."""
    parts = []
    for child in await meta.list_children(f"{ROOT}/partitions"):
        node = await meta.get(f"{ROOT}/partitions/{child}")
        if node is None:
            continue
        raw = json.loads(node.value)
        directory = partition_dir(settings, raw["id"])
        part = PartitionLog(raw["name"], raw["id"], directory, budget.cache(), files)
        for sid in await meta.list_children(segments_path(part.partition_id)):
            seg_node = await meta.get(f"{segments_path(part.partition_id)}/{sid}")
            if seg_node is None:
                continue
            seg = Segment(
                SegmentInfo.from_bytes(seg_node.value),
                part.directory,
                settings.index_interval_bytes,
                files,
            )
            seg.version = seg_node.stat.version
            part.segments.append(seg)
        parts.append(part)
    return parts


async def new_segment(
    meta: MetadataStore,
    settings: StorageSettings,
    part: PartitionLog,
    clock: Clock,
    *,
    first_offset: int | None = None,
) -> Segment:
    """Create the partition's next OPEN segment, starting at ``first_offset`` (by default
    the partition's next offset). Durable when this returns."""
    sid = await next_id(meta, "segment")
    first = part.next_offset if first_offset is None else first_offset
    info = SegmentInfo(
        segment_id=sid,
        partition_id=part.partition_id,
        state=SegmentState.OPEN,
        first_offset=first,
        end_offset=first,
        created_ms=clock.now_ms(),
    )
    seg = Segment(info, part.directory, settings.index_interval_bytes, part.files)
    seg.open_for_append()
    stat = await meta.put(segment_path(info), info.to_bytes(), expected_version=-1)
    seg.version = stat.version
    part.segments.append(seg)
    return seg


async def save_segment(meta: MetadataStore, seg: Segment) -> None:
    """Persist ``seg.info``; the version check catches a second writer of the same log."""
    stat = await meta.put(segment_path(seg.info), seg.info.to_bytes(), expected_version=seg.version)
    seg.version = stat.version


async def load_checkpoint(meta: MetadataStore, journal_dir: Path) -> Checkpoint | None:
    """The node's last checkpoint: its file in ``journal_dir``, else (a data directory
    written before the file existed) the one the metadata store holds; None if neither."""
    path = journal_dir / CHECKPOINT_FILE
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        node = await meta.get(LEGACY_CHECKPOINT)
        if node is None:
            return None
        raw = json.loads(node.value)
    synced = {int(k): int(v) for k, v in raw["synced"].items()}
    return Checkpoint(raw["journal"], raw["position"], synced)


def save_checkpoint(journal_dir: Path, journal: int, position: int, synced: dict[int, int]) -> None:
    """Replace the checkpoint file atomically (written aside, fsynced, renamed, directory
    fsynced): a crash leaves the old checkpoint or the new one, never a torn one. Blocking:
    call it on the engine's writer thread."""
    body = {
        "journal": journal,
        "position": position,
        "synced": {str(k): v for k, v in synced.items()},
    }
    path = journal_dir / CHECKPOINT_FILE
    aside = path.with_suffix(".json.tmp")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(body, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(aside, path)
    fsync_dir(journal_dir)


async def forget_legacy_checkpoint(meta: MetadataStore) -> None:
    """Remove the checkpoint an older version kept in the metadata store (once the file
    holds a newer one), so nothing node-local stays in shared metadata."""
    if await meta.get(LEGACY_CHECKPOINT) is not None:
        await meta.delete(LEGACY_CHECKPOINT)


async def delete_segment(meta: MetadataStore, seg: Segment) -> None:
    await meta.delete(segment_path(seg.info))


async def delete_partition(meta: MetadataStore, part: PartitionLog) -> None:
    """Forget a partition: its segment records, then its name (files are the caller's)."""
    await meta.delete_recursive(segments_path(part.partition_id))
    await meta.delete(partition_path(part.name))
