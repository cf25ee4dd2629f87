"""Where the storage engine keeps its metadata, all of it through the MetadataStore.

    /storage/partitions/<quoted name>   {"id": n, "name": ...}
    /storage/segments/<pid>/<sid>       SegmentInfo (JSON)
    /storage/counters/<kind>            last id handed out
    /storage/checkpoint                 {"journal": n, "position": p, "synced": {sid: size}}

A checkpoint says: every journal record before (journal, position) is in a segment file,
and each listed open segment was fsynced up to the given size.
"""

from __future__ import annotations

import json
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


async def load_checkpoint(meta: MetadataStore) -> Checkpoint | None:
    node = await meta.get(f"{ROOT}/checkpoint")
    if node is None:
        return None
    raw = json.loads(node.value)
    synced = {int(k): int(v) for k, v in raw["synced"].items()}
    return Checkpoint(raw["journal"], raw["position"], synced)


async def save_checkpoint(
    meta: MetadataStore, journal: int, position: int, synced: dict[int, int]
) -> None:
    body = {
        "journal": journal,
        "position": position,
        "synced": {str(k): v for k, v in synced.items()},
    }
    await meta.put(f"{ROOT}/checkpoint", json.dumps(body, sort_keys=True).encode())


async def delete_segment(meta: MetadataStore, seg: Segment) -> None:
    await meta.delete(segment_path(seg.info))


async def delete_partition(meta: MetadataStore, part: PartitionLog) -> None:
    """Forget a partition: its segment records, then its name (files are the caller's)."""
    await meta.delete_recursive(segments_path(part.partition_id))
    await meta.delete(partition_path(part.name))
