"""Reading offloaded segments back as entries, with read-ahead.

A reader keeps each segment's Parquet footer (row-group offset ranges) and a small cache of
decoded row groups. Reading one row group schedules the next few on a thread pool, so a
consumer catching up from the object store streams instead of trickling (Pulsar #3804).
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from magnetar.core.entries import Entry
from magnetar.storage import SegmentInfo
from magnetar.tier.errors import ObjectStoreUnavailableError
from magnetar.tier.object_store import ObjectStore
from magnetar.tier.offloader import key_of
from magnetar.tier.parquet import table_to_entries

PREFETCH = 3
CACHE_GROUPS = 16
_MAX_MS = (1 << 63) // 1000 - 1  # the widest ms timestamp whose µs still fit an int64


@dataclass(frozen=True, slots=True)
class _Footer:
    firsts: list[int]  # first offset of each row group
    lasts: list[int]


class OffloadedReader:
    """Entries of offloaded segments. Blocking: call from worker threads."""

    def __init__(self, store: ObjectStore, *, threads: int = 4) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="magnetar-tier-read")
        self._lock = threading.Lock()
        self._footers: dict[str, _Footer] = {}
        self._groups: OrderedDict[tuple[str, int], Future[list[Entry]]] = OrderedDict()

    def read(self, partition: str, info: SegmentInfo, offset: int, max_entries: int) -> list[Entry]:
        """Entries from the one holding ``offset`` on, within this segment."""
        key = key_of(partition, info)
        footer = self._footer(key)
        group = max(bisect.bisect_right(footer.firsts, offset) - 1, 0)
        out: list[Entry] = []
        while group < len(footer.firsts) and len(out) < max_entries:
            for g in range(group + 1, min(group + 1 + PREFETCH, len(footer.firsts))):
                self._group(key, g, info.segment_id)
            entries = self._group(key, group, info.segment_id).result()
            out += [e for e in entries if e.next_offset > offset][: max_entries - len(out)]
            group += 1
        return out

    def find_time(self, partition: str, info: SegmentInfo, ts: int) -> int | None:
        """The first offset of the segment published at or after ``ts`` (ms), or None."""
        key = key_of(partition, info)
        try:
            with self.store.open(key) as f:
                table = pq.read_table(f, columns=["offset", "publish_time"])
        except OSError as e:
            raise ObjectStoreUnavailableError(f"cannot read {key}: {e}") from None
        micros = min(max(ts, -_MAX_MS), _MAX_MS) * 1000
        at_or_after = pc.greater_equal(table.column("publish_time").cast(pa.int64()), micros)
        index = pc.index(at_or_after, True).as_py()
        return None if index < 0 else int(table.column("offset")[index].as_py())

    def layout(self, key: str) -> pa.Table:
        """A whole offloaded object, in the tier's Parquet layout (rows, not entries)."""
        try:
            with self.store.open(key) as f:
                return pq.read_table(f)
        except OSError as e:
            raise ObjectStoreUnavailableError(f"cannot read {key}: {e}") from None

    def _footer(self, key: str) -> _Footer:
        with self._lock:
            found = self._footers.get(key)
        if found is not None:
            return found
        try:
            with self.store.open(key) as f:
                meta = pq.ParquetFile(f).metadata
        except OSError as e:
            raise ObjectStoreUnavailableError(f"cannot read the footer of {key}: {e}") from None
        col = meta.schema.to_arrow_schema().get_field_index("offset")
        firsts, lasts = [], []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            firsts.append(int(stats.min))
            lasts.append(int(stats.max))
        footer = _Footer(firsts, lasts)
        with self._lock:
            self._footers[key] = footer
        return footer

    def _group(self, key: str, group: int, segment_id: int) -> Future[list[Entry]]:
        with self._lock:
            found = self._groups.get((key, group))
            if found is not None:
                self._groups.move_to_end((key, group))
                return found
            future = self._pool.submit(self._load, key, group, segment_id)
            self._groups[(key, group)] = future
            while len(self._groups) > CACHE_GROUPS:
                self._groups.popitem(last=False)
        # Outside the lock: the callback runs at once (taking the lock) if already done.
        future.add_done_callback(functools.partial(self._forget_failure, (key, group)))
        return future

    def _forget_failure(self, slot: tuple[str, int], future: Future[list[Entry]]) -> None:
        """A failed load is not cached: the next read tries the store again."""
        if future.cancelled() or future.exception() is not None:
            with self._lock:
                if self._groups.get(slot) is future:
                    del self._groups[slot]

    def _load(self, key: str, group: int, segment_id: int) -> list[Entry]:
        try:
            with self.store.open(key) as f:
                table = pq.ParquetFile(f).read_row_group(group)
        except OSError as e:
            raise ObjectStoreUnavailableError(
                f"cannot read row group {group} of {key}: {e}"
            ) from None
        return list(table_to_entries(table, segment_id))

    def forget(self, key: str) -> None:
        """Drop cached data of a deleted object."""
        with self._lock:
            self._footers.pop(key, None)
            for k in [k for k in self._groups if k[0] == key]:
                del self._groups[k]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
