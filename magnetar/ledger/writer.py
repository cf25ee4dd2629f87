"""The writer of one partition: offsets, entry ids, rollover, the segment list, recovery.

A partition's segment list lives in one metadata node, ``/managed-ledgers/<partition>``,
written only by compare-and-set: a writer that lost the partition to a recoverer fails its
next metadata write (and storage refuses its appends once the recoverer fenced the open
segment, before that). Entries go to a :class:`SegmentStorage`, which only stores, serves
and fences. When the writer opens a partition whose last segment is still OPEN (its
previous writer crashed), it fences that segment, reads where it ends and records it CLOSED
before it appends anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from typing import Any, NoReturn
from urllib.parse import quote

from magnetar.core.clock import Clock
from magnetar.core.entries import ENTRY_HEADER_SIZE, Entry
from magnetar.core.futures import resolve
from magnetar.ledger.segment_storage import (
    Placement,
    RolloverPolicy,
    SegmentRecord,
    SegmentSpec,
    SegmentStorage,
    append_starter,
)
from magnetar.meta import MetadataStore
from magnetar.meta.counters import reserve_block
from magnetar.meta.errors import BadVersionError, NodeExistsError
from magnetar.storage import SegmentInfo, SegmentState
from magnetar.storage.errors import FencedError, SegmentChangedError, StorageError
from magnetar.storage.index import NO_TIME
from magnetar.storage.records import check_header_fields

log = logging.getLogger(__name__)

SEGMENT_LISTS = "/managed-ledgers"
SEGMENT_IDS = "/ledgers/next-id"


def segment_list_path(name: str) -> str:
    """The metadata node holding partition ``name``'s segment list."""
    return f"{SEGMENT_LISTS}/{quote(name, safe='')}"


async def recorded_segment(meta: MetadataStore, name: str, segment_id: int) -> SegmentInfo | None:
    """One segment's record as the metadata store holds it now, whoever writes the list
    (another broker, after this one lost the partition); None when it is not listed."""
    node = await meta.get(segment_list_path(name))
    if node is None:
        return None
    for raw in json.loads(node.value)["ledgers"]:
        if raw["info"]["segment_id"] == segment_id:
            return _info_of(raw)
    return None


def _info_of(raw: dict[str, Any]) -> SegmentInfo:
    info = dict(raw["info"])
    info["state"] = SegmentState(info["state"])
    return SegmentInfo(**info)


class SegmentIds:
    """Segment ids no writer ever had, from blocks reserved in the metadata store."""

    def __init__(self, meta: MetadataStore, path: str = SEGMENT_IDS, block: int = 100) -> None:
        self.meta, self.path, self.block = meta, path, block
        self._free: list[int] = []
        self._lock = asyncio.Lock()

    async def next_above(self, above: int) -> int:
        """An id larger than ``above`` (the partition's last).

        A topic's segment ids must grow with its offsets: they are the ledger part of Pulsar
        message ids, which clients compare. Each process reserves blocks of ids, so a topic
        that moves from a process with a newer block to one with an older block would go
        backwards: then the older block is dropped and a new one, above every id handed out
        so far, is reserved.
        """
        async with self._lock:
            if not self._free or self._free[-1] <= above:
                first = await reserve_block(self.meta, self.path, self.block) + 1  # ids from 1
                self._free = list(range(first + self.block - 1, first - 1, -1))
            return self._free.pop()


class _Open:
    """The OPEN segment as its writer sees it: entry ids handed out and acknowledged."""

    def __init__(self, record: SegmentRecord) -> None:
        self.record = record
        self.next_eid = 0
        self.assigned_bytes = 0  # stored size of the entries handed to storage
        self.lac = -1  # the last entry acknowledged, every one before it too
        self.acked: dict[int, Entry] = {}  # acknowledged above lac, out of order
        self.in_flight = 0  # appends handed to storage that have not ended
        self.idle: asyncio.Future[None] | None = None  # set when in_flight falls to 0
        self.failed: StorageError | None = None
        # Whether the failure has been raised to a caller yet. Until then every append
        # fails with it too (see SegmentWriter.append).
        self.reported = False

    @property
    def segment_id(self) -> int:
        return self.record.info.segment_id

    def raise_failure(self) -> NoReturn:
        """Raise the segment's failure to a caller, who has then heard of it."""
        assert self.failed is not None
        self.reported = True
        raise self.failed


class SegmentWriter:
    """The only writer of one partition. Create with :meth:`open`.

    ``on_confirmed`` is told each entry once it and every earlier one of its segment are
    acknowledged, in offset order, from wherever storage reports an append's end (the
    local engine's flusher, say): it must not block.
    """

    def __init__(
        self,
        name: str,
        storage: SegmentStorage,
        meta: MetadataStore,
        ids: SegmentIds,
        policy: RolloverPolicy,
        clock: Clock,
        on_confirmed: Callable[[Entry], None] | None = None,
    ) -> None:
        self.name = name
        self.storage = storage
        self.meta = meta
        self.ids = ids
        self.policy = policy
        self.clock = clock
        self.path = segment_list_path(name)
        self.records: list[SegmentRecord] = []
        self.version = -1
        self.start = 0  # first retained offset
        self.end = 0  # the next offset to hand out (appends in flight included)
        self.lock = asyncio.Lock()  # one append (assign + send), roll or list change at a time
        self._queued = 0  # appends waiting for the lock (a later one must not pass them)
        self.fenced: FencedError | None = None
        self.recovered = 0  # segments of a previous writer recovered at open
        self._open: _Open | None = None
        self._saving = asyncio.Lock()  # metadata writes one at a time (their versions chain)
        self._on_confirmed = on_confirmed
        self._start_append = append_starter(storage)

    @classmethod
    async def open(
        cls,
        name: str,
        storage: SegmentStorage,
        meta: MetadataStore,
        ids: SegmentIds,
        policy: RolloverPolicy,
        clock: Clock,
        on_confirmed: Callable[[Entry], None] | None = None,
    ) -> SegmentWriter:
        """Load the partition's segment list (recovering an OPEN last segment) or create
        an empty one. Durable when this returns."""
        writer = cls(name, storage, meta, ids, policy, clock, on_confirmed)
        if await writer._load():
            last = writer.records[-1] if writer.records else None
            if last is not None and last.info.state is SegmentState.OPEN:
                await writer._recover(last)
        else:
            await writer._save([])
        return writer

    # -- the segment list ---------------------------------------------------------------

    async def _load(self) -> bool:
        node = await self.meta.get(self.path)
        if node is None:
            return False
        d = json.loads(node.value)
        self.version = node.stat.version
        self.start = d["start"]
        for raw in d["ledgers"]:
            placement = {k: v for k, v in raw.items() if k != "info"}
            record = SegmentRecord(_info_of(raw))
            self.storage.attach(self._spec(record), placement)
            self.records.append(record)
        last = self.records[-1].info if self.records else None
        self.end = last.end_offset if last else self.start
        return True

    def _spec(self, record: SegmentRecord) -> SegmentSpec:
        async def persist(placement: Placement) -> None:
            await self._save(self.records, placements={record.info.segment_id: placement})

        return SegmentSpec(self.name, record, persist)

    async def _save(
        self,
        records: list[SegmentRecord],
        *,
        infos: dict[int, SegmentInfo] | None = None,
        placements: dict[int, Placement] | None = None,
        start: int | None = None,
    ) -> None:
        """Write the segment list by compare-and-set (``infos``/``placements`` in place of
        the recorded ones); a lost race means another writer took the partition, and this
        one fails everything from then on."""
        async with self._saving:
            if self.fenced is not None:
                raise self.fenced
            rows = []
            for r in records:
                sid = r.info.segment_id
                info = (infos or {}).get(sid, r.info)
                placement = (placements or {}).get(sid) or self.storage.placement(sid)
                rows.append({"info": dataclasses.asdict(info), **placement})
            body = {"start": self.start if start is None else start, "ledgers": rows}
            try:
                stat = await self.meta.put(
                    self.path, json.dumps(body).encode(), expected_version=self.version
                )
            except (BadVersionError, NodeExistsError):
                self.fenced = FencedError(
                    f"the segment list of {self.name} was changed by another writer: this "
                    "broker no longer owns the topic"
                )
                if self._open is not None:
                    self._fail(self._open, self.fenced)
                raise self.fenced from None
            self.version = stat.version

    # -- appends ------------------------------------------------------------------------

    async def append(
        self,
        payload: bytes,
        *,
        count: int = 1,
        publish_time: int | None = None,
        event_time: int = -1,
        fmt: int = 0,
    ) -> Entry:
        """Append one entry; returns once storage has it durable (and every earlier entry).
        If it raises, nothing of it was acknowledged.

        Once the open segment fails, the appends that follow are never stored ahead of
        the failed ones' retries: an append fails with that failure if it was waiting
        when the segment failed, or if it comes before the failure has been raised to any
        caller. A caller that stops publishing when an append raises (a topic fences
        itself, as Pulsar's does) therefore finds stored after a failure only what was
        appended after it had heard of it; the next append after that starts a new
        segment.
        """
        ts = self.clock.now_ms() if publish_time is None else publish_time
        check_header_fields(count, ts, event_time, fmt, len(payload))
        seg, policy = self._open, self.policy
        if seg is not None and seg.failed is not None and not seg.reported:
            seg.raise_failure()
        if (
            seg is not None
            and seg.failed is None
            and self.fenced is None
            and not self.lock.locked()
            and not self._queued
            # well inside the limits (else _writable asks the policy): no calls to pay
            and seg.assigned_bytes < policy.max_bytes
            and (not policy.max_entries or seg.next_eid < policy.max_entries)
            and (not policy.max_age_s or not self._due(seg))
        ):
            # The common case, with no await before the entry is handed on: nothing holds
            # the lock or waits for it (no roll, no list change, no earlier append queued),
            # and nothing can start one before this call returns to the loop.
            eid, done = self._send(seg, payload, count, ts, event_time, fmt)
        else:
            called_on = seg if seg is not None and seg.failed is None else None
            self._queued += 1
            try:
                await self.lock.acquire()
            finally:
                self._queued -= 1
            try:
                if called_on is not None and called_on.failed is not None:
                    # it waited behind entries that failed: stored now, in a new segment,
                    # it would come before their retries
                    called_on.raise_failure()
                seg = await self._writable()
                eid, done = self._send(seg, payload, count, ts, event_time, fmt)
            finally:
                self.lock.release()
        try:
            entry = await done
        except Exception:
            seg.reported = seg.reported or seg.failed is not None
            raise
        if eid > seg.lac and seg.failed is not None:
            seg.raise_failure()  # never acknowledged: an earlier entry of the segment failed
        return entry

    def _send(
        self, seg: _Open, payload: bytes, count: int, ts: int, event_time: int, fmt: int
    ) -> tuple[int, asyncio.Future[Entry]]:
        """Give the next entry id and offsets to an entry and hand it to storage (no await:
        storage takes the segment's entries in id order). Returns its id and the future
        its caller waits on."""
        eid = seg.next_eid
        entry = Entry(self.end, count, ts, event_time, fmt, payload, seg.record.info.segment_id)
        seg.next_eid += 1
        seg.assigned_bytes += ENTRY_HEADER_SIZE + len(payload)  # entry.stored_size
        self.end += count
        # A caller that goes away (a closed connection) must not cut an append in flight
        # short, the segment's later entries depend on it: its end is accounted for by
        # _settled whatever happens to ``done``, which only wakes the caller.
        done: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        seg.in_flight += 1
        settle = functools.partial(self._settled, seg, eid, entry, done)
        try:
            self._start_append(entry.segment_id, eid, entry, settle)
        except Exception as e:  # a storage that raises instead of telling ``settle``
            settle(e)
        return eid, done

    async def _writable(self) -> _Open:
        """The open segment to append to: a new one after a failure or when it is due."""
        if self.fenced is not None:
            raise self.fenced
        seg = self._open
        if seg is not None and seg.failed is not None:
            if isinstance(seg.failed, FencedError):
                raise seg.failed
            await self._close_open()  # nothing above its lac was acknowledged: end it there
            seg = None
        elif seg is not None and self._due(seg):
            await self._close_open()
            seg = None
        if seg is None:
            seg = await self._new_segment()
        return seg

    def _due(self, seg: _Open) -> bool:
        created = seg.record.info.created_ms
        now = self.clock.now_ms() if self.policy.max_age_s else created  # no clock: no age
        due = self.policy.due(seg.assigned_bytes, seg.next_eid, created, now)
        return due and self.storage.can_roll(seg.segment_id)

    def _settled(
        self,
        seg: _Open,
        eid: int,
        entry: Entry,
        done: asyncio.Future[Entry],
        error: BaseException | None,
    ) -> None:
        """Account for an append that ended (told by storage, maybe before its start
        returned); acknowledgements apply in entry-id order. Then wake its caller."""
        seg.in_flight -= 1
        if error is None and eid == seg.lac + 1 and not seg.acked:  # the usual: in order
            seg.lac = eid
            self._confirmed(seg.record.info, entry)
        elif error is not None:
            failed = error if isinstance(error, StorageError) else StorageError(str(error))
            if isinstance(error, asyncio.CancelledError):
                failed = StorageError(f"an append to {self.name} was cancelled")
            self._fail(seg, failed)
        else:
            seg.acked[eid] = entry
            while seg.lac + 1 in seg.acked:
                seg.lac += 1
                self._confirmed(seg.record.info, seg.acked.pop(seg.lac))
        if seg.in_flight == 0 and seg.idle is not None:
            resolve(seg.idle, None)
        if done.done():  # its caller went away
            return
        if error is None:
            done.set_result(entry)
        else:
            done.set_exception(error)

    def _confirmed(self, info: SegmentInfo, entry: Entry) -> None:
        # once per append: arithmetic in place of Entry's properties and max()
        info.end_offset = entry.base_offset + entry.count
        info.entries += 1
        info.size += ENTRY_HEADER_SIZE + len(entry.payload)
        if info.first_publish_time == NO_TIME:
            info.first_publish_time = entry.publish_time
        if entry.publish_time > info.max_publish_time:
            info.max_publish_time = entry.publish_time
        if self._on_confirmed is not None:
            self._on_confirmed(entry)

    def _fail(self, seg: _Open, error: StorageError) -> None:
        """The segment takes no more appends: later ones fail too, offsets rewind to the
        last acknowledged entry (the next segment starts there)."""
        if seg.failed is None:
            seg.failed = error
            log.warning("%s: segment %d failed: %s", self.name, seg.segment_id, error)
        if self._open is seg:
            self.end = seg.record.info.end_offset

    async def _new_segment(self) -> _Open:
        """Append a fresh OPEN segment to the list (durable in metadata)."""
        last = self.records[-1].info.segment_id if self.records else 0
        sid = await self.ids.next_above(last)
        info = SegmentInfo(
            sid, 0, SegmentState.OPEN, self.end, self.end, created_ms=self.clock.now_ms()
        )
        record = SegmentRecord(info)
        spec = self._spec(record)
        await self.storage.open_segment(spec)
        try:
            await self._save([*self.records, record])
        except BaseException:
            self.storage.detach(sid)
            raise
        self.records.append(record)
        self._open = _Open(record)
        return self._open

    async def _close_open(self) -> None:
        """Close the OPEN segment at its last acknowledged entry (after appends in flight
        end). If the list cannot be written, the segment stays open: retried later."""
        seg = self._open
        if seg is None:
            return
        while seg.in_flight:
            seg.idle = asyncio.get_running_loop().create_future()
            await seg.idle
        await self.storage.seal(seg.segment_id, seg.lac)
        info = seg.record.info
        closed = dataclasses.replace(
            info,
            state=SegmentState.CLOSED,
            end_offset=info.end_offset,
            closed_ms=self.clock.now_ms(),
        )
        await self._save(self.records, infos={seg.segment_id: closed})
        self._open = None
        seg.record.info = closed
        self.end = closed.end_offset

    async def close_open(self) -> None:
        """Close the open segment at its end (a clean stop: the next writer needs no
        recovery); nothing when it failed or another writer took the partition."""
        async with self.lock:
            if self._open is not None and self._open.failed is None and self.fenced is None:
                await self._end_open()

    async def _end_open(self) -> None:
        """Close the open segment, or drop it from the list when it holds nothing (as
        Pulsar's managed ledger drops an empty current ledger): a partition opened and
        closed many times keeps no trail of empty segments."""
        seg = self._open
        if seg is None or seg.next_eid:  # an entry was handed to storage: keep it
            await self._close_open()
            return
        kept = [r for r in self.records if r is not seg.record]
        await self._save(kept)
        self.records, self._open = kept, None
        try:
            await self.storage.delete(seg.segment_id)
        except StorageError as e:  # unlisted: nothing reads it again
            log.warning("%s: deleting empty segment %d: %s", self.name, seg.segment_id, e)
        self.storage.detach(seg.segment_id)

    async def roll(self) -> bool:
        """Close the open segment now if it holds anything; False if it did not."""
        async with self.lock:
            if self._open is None or self._open.record.info.entries == 0:
                return False
            await self._close_open()
            return True

    # -- recovery -----------------------------------------------------------------------

    async def _recover(self, record: SegmentRecord) -> None:
        """Fence the previous writer's open segment, find where it ends, close it."""
        sid = record.info.segment_id
        last = await self.storage.fence(sid)
        end, size, first_ts, max_ts = record.info.first_offset, 0, NO_TIME, NO_TIME
        eid = 0
        while eid <= last:  # its size and times were never recorded: read them once
            got = await self.storage.read(sid, eid, last)
            if not got:
                raise StorageError(f"entry {eid} of segment {sid} of {self.name} is not readable")
            for entry in got:
                size += entry.stored_size
                if first_ts == NO_TIME:
                    first_ts = entry.publish_time
                max_ts = max(max_ts, entry.publish_time)
                end = entry.next_offset
            eid += len(got)
        await self.storage.seal(sid, last)
        closed = dataclasses.replace(
            record.info,
            state=SegmentState.CLOSED,
            end_offset=end,
            entries=last + 1,
            size=size,
            first_publish_time=first_ts,
            max_publish_time=max_ts,
            closed_ms=self.clock.now_ms(),
        )
        await self._save(self.records, infos={sid: closed})
        record.info = closed
        self.end = end
        self.recovered += 1
        log.warning(
            "%s: recovered segment %d of a previous writer: closed at entry %d (offset %d)",
            self.name,
            sid,
            last,
            end,
        )

    # -- the list -----------------------------------------------------------------------

    def segments(self) -> list[SegmentInfo]:
        return [dataclasses.replace(r.info) for r in self.records]

    def record_of(self, segment_id: int) -> SegmentRecord:
        for r in self.records:
            if r.info.segment_id == segment_id:
                return r
        raise StorageError(f"no segment {segment_id} in {self.name}")

    async def update_segment(
        self,
        segment_id: int,
        *,
        expect: Callable[[SegmentInfo], bool] | None = None,
        **changes: Any,
    ) -> SegmentInfo:
        """Change a closed segment's record (state, offload details); durable on return.
        With ``expect``, only if the record satisfies it (checked under the list's lock),
        else SegmentChangedError and nothing changes."""
        async with self.lock:
            record = self.record_of(segment_id)
            if record.info.state is SegmentState.OPEN:
                raise StorageError(f"segment {segment_id} of {self.name} is still open")
            if expect is not None and not expect(record.info):
                raise SegmentChangedError(
                    f"segment {segment_id} of {self.name} changed meanwhile "
                    f"({record.info.state.value}): its record is left as it is"
                )
            changed = dataclasses.replace(record.info, **changes)
            await self._save(self.records, infos={segment_id: changed})
            record.info = changed
            return dataclasses.replace(changed)

    async def trim(self, before: int) -> list[SegmentRecord]:
        """Drop from the list the closed segments before ``before`` (a prefix, stopping at
        the open or an OFFLOADING one); durable when it returns. Their entries are the
        caller's to delete (storage ``delete``)."""
        async with self.lock:
            doomed: list[SegmentRecord] = []
            for record in self.records[:-1]:
                info = record.info
                if info.end_offset > before or info.state in (
                    SegmentState.OPEN,
                    SegmentState.OFFLOADING,
                ):
                    break
                doomed.append(record)
            if not doomed:
                return []
            kept = self.records[len(doomed) :]
            start = kept[0].info.first_offset
            await self._save(kept, start=start)
            self.records, self.start = kept, start
            return doomed

    async def delete(self) -> None:
        """Delete every segment's entries, then the segment list."""
        async with self.lock:
            if self._open is not None:
                self._fail(self._open, StorageError(f"partition {self.name} was deleted"))
            for record in self.records:
                await self.storage.delete(record.info.segment_id)
            self.fenced = FencedError(f"partition {self.name} was deleted")
            self._forget()
            await self.meta.delete(self.path)

    async def unload(self) -> None:
        """Close the open segment at its end and stop: the next owner opens the partition
        without recovery."""
        async with self.lock:
            seg = self._open
            if seg is not None and seg.failed is None and self.fenced is None:
                await self._end_open()
            self.fenced = FencedError(f"{self.name} was unloaded: another broker serves it")
            self._forget()

    def release(self) -> None:
        """Stop writing (ownership lost): appends in flight fail, nothing is closed — the
        next owner fences and recovers the open segment."""
        self.fenced = FencedError(f"{self.name} moved to another broker")
        if self._open is not None:
            self._fail(self._open, self.fenced)
        self._forget()

    def _forget(self) -> None:
        for record in self.records:
            self.storage.detach(record.info.segment_id)

    @property
    def open_segment(self) -> SegmentRecord | None:
        return self._open.record if self._open is not None else None

    @property
    def confirmed_end(self) -> int:
        """The offset after the last acknowledged entry (:attr:`end` counts the appends in
        flight too: they have offsets, not yet an acknowledgement)."""
        return self.records[-1].info.end_offset if self.records else self.start

    @property
    def full(self) -> bool:
        """Whether the open segment is due to roll (size, entries or age)."""
        return self._open is not None and self._open.failed is None and self._due(self._open)

    async def ensure_open(self) -> None:
        """Have an open segment that takes appends: a new one when there is none or the
        open one is due to roll or failed (Pulsar's managed ledger opens its next ledger
        at open and as soon as one is full, not at the next add)."""
        async with self.lock:
            await self._writable()

    @property
    def healthy(self) -> bool:
        """Whether the open segment (if any) still takes appends."""
        return self._open is None or self._open.failed is None
