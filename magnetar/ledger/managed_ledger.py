"""The managed ledger of one partition: append, read, find by time, MessageId ↔ offset.

Offsets are continuous per partition (DESIGN.md decision 1). A Pulsar message id is
(ledger id, entry id, batch index) where the ledger id is the segment id and the entry id is
the entry's base offset minus the segment's first offset, so the mapping both ways needs
only the segment list — never an id packed into an offset.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

from magnetar.core.entries import Entry
from magnetar.core.errors import MagnetarError
from magnetar.core.futures import all_to_the_end, to_thread_to_the_end
from magnetar.core.ids import MessageId
from magnetar.ledger import offload_attempts as attempts
from magnetar.ledger import table_commits
from magnetar.ledger.errors import NoObjectStoreError, SegmentNotOffloadableError
from magnetar.storage import (
    OffsetOutOfRangeError,
    SegmentInfo,
    SegmentNotLocalError,
    SegmentState,
)
from magnetar.storage.errors import SegmentChangedError
from magnetar.tier import (
    IcebergCommitError,
    Manifest,
    ObjectNotFoundError,
    Tier,
    ValueSchema,
    keys_of,
)

log = logging.getLogger(__name__)


class LedgerStorage(Protocol):
    """Where a ledger's entries live (decision 8). The storage engine implements it today;
    a quorum client over several storage nodes can implement it later unchanged above."""

    async def create_partition(self, name: str) -> None: ...

    async def delete_partition(self, name: str) -> None: ...

    async def trim(self, name: str, before: int) -> list[SegmentInfo]: ...

    def has_partition(self, name: str) -> bool: ...

    async def append(
        self,
        name: str,
        payload: bytes,
        *,
        count: int = 1,
        publish_time: int | None = None,
        event_time: int = -1,
        fmt: int = 0,
    ) -> Entry: ...

    async def read(
        self, name: str, offset: int, *, max_entries: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Entry]: ...

    async def find_offset(self, name: str, ts: int) -> int: ...

    async def find_in_segment(self, name: str, segment_id: int, ts: int) -> int | None: ...

    async def update_segment(
        self,
        name: str,
        segment_id: int,
        *,
        expect: Callable[[SegmentInfo], bool] | None = None,
        **changes: Any,
    ) -> SegmentInfo:
        """Change a closed segment's record; durable on return. With ``expect``, only if the
        record satisfies it (checked atomically with the change), else SegmentChangedError
        and nothing changes."""
        ...

    async def drop_local_copy(self, name: str, segment_id: int) -> None: ...

    def end_offset(self, name: str) -> int: ...

    async def unload(self, name: str) -> None:
        """Close the partition's open segment and forget it (a graceful hand-over)."""
        ...

    def release(self, name: str) -> None:
        """Forget the partition without closing it: its next writer (another broker) will
        recover it. Nothing more is written through this process."""
        ...

    async def replica_reads(self, name: str, segment_id: int) -> list[dict[str, Any]] | None:
        """Storage nodes a reader may fetch a closed segment from directly; None: through
        the broker (the local engine, or replicas that do not hold whole ranges)."""
        ...

    def start_offset(self, name: str) -> int: ...

    def segments(self, name: str) -> list[SegmentInfo]: ...

    async def recorded(self, name: str, segment_id: int) -> SegmentInfo | None:
        """One segment's record as stored now, also once this process released the
        partition (its next owner writes it then); None when it is not listed."""
        ...

    async def check(self, name: str, *, repair: bool = False) -> list[dict[str, Any]]:
        """Read and verify every stored entry: one row per segment (``segmentId``,
        ``state``, ``entries``, ``error``: file, byte and problem, or ""). With ``repair``,
        damaged copies that have a good replica are replaced first (replicated storage)."""
        ...

    def damaged(self, name: str) -> dict[int, str]:
        """Segments found damaged by a read or a check since start: id -> problem."""
        ...

    async def next_readable(self, name: str, offset: int) -> int:
        """After a read at ``offset`` failed on damage: the first offset after it that reads
        (the end of its segment if none does)."""
        ...


# after ownership was lost, how long to wait between reads of a segment's record (seconds)
# while the metadata store connects a new session: some 30 s in all
RECORD_READ_PAUSES = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)


class ManagedLedger:
    """One partition's log. Appends are durable when :meth:`append` returns."""

    def __init__(
        self,
        name: str,
        storage: LedgerStorage,
        tier: Tier | None = None,
        offloading: set[int] | None = None,
    ) -> None:
        self.name = name
        self.storage = storage
        self.tier = tier
        self._firsts: dict[int, int] = {}  # segment id → first offset
        self._ids: list[int] = []  # known segment ids, ascending
        self._listeners: list[Callable[[], None]] = []
        # segment ids with an offload in flight in this process: shared by every ledger the
        # same factory opens on this partition, so a ledger reopened while an earlier one's
        # offload runs (a bundle unloaded and loaded here again) leaves that offload alone
        self._offloading: set[int] = set() if offloading is None else offloading
        self._offload_tasks: set[asyncio.Task[Any]] = set()  # cancelled when unloaded
        self._settling: asyncio.Task[int] | None = None  # clean_abandoned, started at open
        self._compacting = asyncio.Lock()  # table compaction, and retention beside it
        # what a subscription does at a damaged entry: skip it, or wait there (Pulsar's
        # ManagedLedgerConfig.autoSkipNonRecoverableData); set by the broker
        self.auto_skip_non_recoverable_data = False
        # records before it are deleted (Kafka's DeleteRecords), even while still stored
        self._deleted_before = 0

    @classmethod
    async def open(
        cls,
        name: str,
        storage: LedgerStorage,
        tier: Tier | None = None,
        *,
        offloading: set[int] | None = None,
    ) -> ManagedLedger:
        """Open the ledger, creating its partition if it does not exist yet. ``offloading``:
        the partition's offloads in flight in this process (see LedgerFactory)."""
        await storage.create_partition(name)
        ledger = cls(name, storage, tier, offloading)
        ledger._refresh()
        await ledger._undo_cut_offloads()
        if tier is not None:
            # in the background: settling an earlier owner's intents asks the Iceberg
            # catalog, which may be slow or locked, and only offload records wait for it
            ledger._settling = asyncio.get_running_loop().create_task(ledger._settle_at_open())
            ledger._offload_tasks.add(ledger._settling)
        return ledger

    async def _settle_at_open(self) -> int:
        try:
            return await self._clean_abandoned()
        except Exception as e:  # nobody awaits this task: said here
            log.warning(
                "%s: offload records found at open not settled now (each is before its "
                "segment's next offload): %s",
                self.name,
                e,
            )
            return 0
        finally:
            self._offload_tasks.discard(asyncio.current_task())

    async def settled(self) -> None:
        """Wait until the offload records found at open are settled (see ``open``): every
        call that changes offload records or the table waits for it first. Returns at once
        when that ended, failed or was cancelled (the ledger was unloaded)."""
        task = self._settling
        if task is not None and not task.done() and task is not asyncio.current_task():
            await asyncio.wait([task])

    async def _undo_cut_offloads(self) -> None:
        """A segment OFFLOADING at open was cut off with the process that offloaded it (a
        crash, or an owner that lost the topic): CLOSED again, so it is offloaded afresh
        and retention can pass it. Its attempt stays recorded: ``clean_abandoned`` deletes
        what the attempt left. (The engine's own recovery does this for its records; the
        writer's segment list has no recovery of its own.) One whose offload still runs in
        this process is left to it."""
        for info in self.storage.segments(self.name):
            if info.state is SegmentState.OFFLOADING and info.segment_id not in self._offloading:
                log.info(
                    "%s: segment %d was being offloaded when its process ended: CLOSED again",
                    self.name,
                    info.segment_id,
                )
                await self.storage.update_segment(
                    self.name, info.segment_id, state=SegmentState.CLOSED
                )

    def _refresh(self) -> None:
        segments = self.storage.segments(self.name)
        self._firsts = {s.segment_id: s.first_offset for s in segments}
        self._ids = sorted(self._firsts)

    # -- offsets ------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset the next message will get; the last confirmed one is this minus 1."""
        return self.storage.end_offset(self.name)

    @property
    def start_offset(self) -> int:
        """The first offset a reader can get: the first stored one, or the offset records
        were deleted before (:meth:`delete_before`), whichever is larger."""
        return max(self.storage.start_offset(self.name), self._deleted_before)

    def delete_before(self, offset: int) -> None:
        """Make every record before ``offset`` (at most the end offset) unreadable now, as if
        trimmed: reads below it raise OffsetOutOfRangeError and :attr:`start_offset` moves
        there. Not durable by itself: the caller keeps ``offset`` and sets it again when the
        ledger is opened. The segments wholly below it go at :meth:`trim_deleted`."""
        if offset > self.end_offset:
            raise ValueError(f"{offset} is past the end offset {self.end_offset} of {self.name}")
        self._deleted_before = max(self._deleted_before, offset)

    async def trim_deleted(self) -> list[SegmentInfo]:
        """Delete the closed segments that hold only records before :meth:`delete_before`'s
        offset (see :meth:`trim`); nothing when there are none."""
        if self._deleted_before <= self.storage.start_offset(self.name):
            return []
        return await self.trim(self._deleted_before)

    def message_id(self, entry: Entry, batch_index: int = -1) -> MessageId:
        """The Pulsar id of ``entry`` (or of message ``batch_index`` inside it)."""
        first = self._firsts.get(entry.segment_id)
        if first is None:
            self._refresh()
            first = self._firsts.get(entry.segment_id, entry.base_offset)
        return MessageId(entry.segment_id, entry.base_offset - first, batch_index)

    def offset_of(self, mid: MessageId) -> int:
        """The offset of the message ``mid`` names.

        Ids of segments that no longer exist map to the nearest retained position: before
        the first known segment → the start, after the last → the end.
        """
        if mid.ledger_id not in self._firsts:
            self._refresh()
        first = self._firsts.get(mid.ledger_id)
        if first is None:
            i = bisect.bisect_left(self._ids, mid.ledger_id)
            return self.start_offset if i == 0 else self.end_offset
        return first + max(mid.entry_id, 0) + max(mid.batch_index, 0)

    def stored_offset(self, mid: MessageId) -> int | None:
        """The base offset of the stored entry ``mid`` names, or None when no such entry
        exists (an unknown segment, or an entry id past its segment's end). Called per acked
        id, so it answers from the cached segment map instead of copying the segment list."""
        if mid.ledger_id not in self._firsts:
            self._refresh()
        first = self._firsts.get(mid.ledger_id)
        if first is None or mid.entry_id < 0:
            return None
        offset = first + mid.entry_id
        i = bisect.bisect_right(self._ids, mid.ledger_id)
        end = self._firsts[self._ids[i]] if i < len(self._ids) else self.end_offset
        return offset if self.start_offset <= offset < end else None

    def segment_first_offsets(self) -> dict[int, int]:
        self._refresh()
        return dict(self._firsts)

    # -- data ---------------------------------------------------------------------------

    async def append(
        self,
        payload: bytes,
        *,
        count: int = 1,
        publish_time: int | None = None,
        event_time: int = -1,
        fmt: int = 0,
    ) -> Entry:
        """Append one entry; durable and readable when this returns. Listeners are told."""
        entry = await self.storage.append(
            self.name,
            payload,
            count=count,
            publish_time=publish_time,
            event_time=event_time,
            fmt=fmt,
        )
        if entry.segment_id not in self._firsts:
            self._refresh()
        for listener in self._listeners:
            listener()
        return entry

    async def read(
        self, offset: int, *, max_entries: int = 100, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset``, wherever its segment lives: local files,
        or the object store once offloaded (the caller never knows which)."""
        if offset < self._deleted_before:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.name} was deleted by a records deletion; the "
                f"first offset is now {self.start_offset}"
            )
        try:
            return await self.storage.read(
                self.name, offset, max_entries=max_entries, max_bytes=max_bytes
            )
        except SegmentNotLocalError as e:
            return await self._read_offloaded(e.segment_id, offset, max_entries)

    async def _read_offloaded(self, segment_id: int, offset: int, max_entries: int) -> list[Entry]:
        info = self._segment(segment_id)
        if info is None:  # trimmed by retention meanwhile
            raise self._trimmed(offset)
        if self.tier is None:
            raise NoObjectStoreError(
                f"segment {segment_id} of {self.name} is offloaded but no object store is "
                "configured: set tier_url to the store it was offloaded to"
            )
        try:
            return await asyncio.to_thread(
                self.tier.reader.read, self.name, info, offset, max_entries
            )
        except ObjectNotFoundError:
            now = self._segment(segment_id)
            if now is None:  # trimmed by retention meanwhile
                raise self._trimmed(offset) from None
            if keys_of(self.name, now) != keys_of(self.name, info):  # compacted meanwhile
                return await asyncio.to_thread(
                    self.tier.reader.read, self.name, now, offset, max_entries
                )
            raise

    def _trimmed(self, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(
            f"offset {offset} of {self.name} was deleted by retention; the first "
            f"stored offset is now {self.start_offset}"
        )

    def _segment(self, segment_id: int) -> SegmentInfo | None:
        return next((s for s in self.segments() if s.segment_id == segment_id), None)

    async def find_offset(self, ts: int) -> int:
        """First offset whose publish time is >= ``ts`` (the end offset if none); segments
        are chosen by binary search on their publish-time range, then searched inside."""
        segments = self.segments()
        running, maxima = -(1 << 63), []
        for s in segments:
            running = max(running, s.max_publish_time)
            maxima.append(running)
        for seg in segments[bisect.bisect_left(maxima, ts) :]:
            found = await self._find_in(seg, ts)
            if found is not None:
                return max(found, self.start_offset)
        return self.end_offset

    async def _find_in(self, seg: SegmentInfo, ts: int) -> int | None:
        """Search one segment wherever it lives; None if retention deleted it meanwhile."""
        if seg.local:
            # SegmentNotLocalError: its local copy was dropped meanwhile; ask the tier.
            with contextlib.suppress(SegmentNotLocalError):
                try:
                    return await self.storage.find_in_segment(self.name, seg.segment_id, ts)
                except OffsetOutOfRangeError:
                    return None
        if self.tier is None:
            return None
        try:
            return await asyncio.to_thread(self.tier.reader.find_time, self.name, seg, ts)
        except ObjectNotFoundError:
            if self._segment(seg.segment_id) is None:
                return None
            raise

    # -- tiered storage -----------------------------------------------------------------

    async def offload(
        self, segment_id: int, *, value_schema: ValueSchema | None = None
    ) -> SegmentInfo:
        """Copy a closed segment to the object store, verified, then mark it OFFLOADED.
        With an Iceberg catalog, its rows (typed by ``value_schema``) are committed to the
        topic's table before the mark (see ``table_commits``).

        Durable when this returns: the segment record says OFFLOADED and names the verified
        object. On failure the segment is CLOSED and local again and the error is raised:
        nothing is lost, and a later retry starts afresh as a new attempt (what the failed
        attempt left behind is deleted now, or by ``clean_abandoned`` later).

        Raises SegmentNotOffloadableError, changing nothing, unless the segment is CLOSED
        and local with no other offload of it in flight.
        """
        if self.tier is None:
            raise NoObjectStoreError(f"{self.name} has no object store: set tier_url to offload")
        await self.settled()
        self._check_offloadable(segment_id)
        self._offloading.add(segment_id)
        task = asyncio.current_task()
        if task is not None:
            self._offload_tasks.add(task)
        try:
            settled = await table_commits.settle_before_offload(self, self.tier, segment_id)
            if settled is not None:  # an earlier attempt's commit was found: done
                return settled
            return await self._offload(self.tier, segment_id, value_schema)
        finally:
            self._offloading.discard(segment_id)
            self._offload_tasks.discard(task)

    def _check_offloadable(self, segment_id: int) -> None:
        info = self._segment(segment_id)
        if info is None:
            raise SegmentNotOffloadableError(f"segment {segment_id} of {self.name} does not exist")
        busy = segment_id in self._offloading
        if busy or info.state is not SegmentState.CLOSED or not info.local:
            where = (
                "being offloaded" if busy else info.state.value + ("" if info.local else ", remote")
            )
            raise SegmentNotOffloadableError(
                f"segment {segment_id} of {self.name} is {where}: only a CLOSED segment with "
                "its local copy can be offloaded"
            )

    async def _offload(
        self, tier: Tier, segment_id: int, value_schema: ValueSchema | None
    ) -> SegmentInfo:
        info = self._segment(segment_id)
        assert info is not None
        attempt = attempts.new_attempt()
        # Recorded before anything is uploaded: whatever this attempt leaves behind is
        # found again by its id (clean_abandoned), and nothing else is ever deleted.
        before = attempts.attempts_of(info)
        recorded = [*before, attempt]
        try:
            info = await self.storage.update_segment(
                self.name,
                segment_id,
                expect=lambda now: (
                    now.state is SegmentState.CLOSED
                    and now.local
                    and attempts.attempts_of(now) == before
                ),
                state=SegmentState.OFFLOADING,
                offload={"attempts": recorded},
            )
        except SegmentChangedError as e:
            raise SegmentNotOffloadableError(f"{e}: not offloaded now") from e
        # Every later change of the record is made only while this attempt still offloads
        # the segment: a bundle handed to another broker and back meanwhile made its record
        # another owner's, who reverted it and deleted this attempt's objects.
        ours = attempts.offloading_by(attempt)
        keys: list[str] = []
        try:
            manifest = await self._write_objects(tier, info, attempt, value_schema)
            keys = manifest.keys
            details: dict[str, Any] = {
                "attempts": recorded,
                "key": manifest.object_key,
                "sha256": manifest.sha256,
                "rows": manifest.row_count,
                "size": manifest.size,
                "offloadedMs": manifest.offloaded_ms,
                "store": tier.store.url,
            }
            if manifest.objects:
                details["objects"] = manifest.keys
            if tier.iceberg is not None:
                details["iceberg"] = await table_commits.commit(
                    self, tier, info, attempt, manifest.keys, details
                )
            return await self.storage.update_segment(
                self.name, segment_id, expect=ours, state=SegmentState.OFFLOADED, offload=details
            )
        except SegmentChangedError as e:  # another owner took the segment's record over
            await self._abandon_offload(info, recorded, keys)
            raise SegmentNotOffloadableError(f"{e}: this offload of it is dropped") from e
        except BaseException:
            await self._abandon_offload(info, recorded, keys)
            raise

    async def _write_objects(
        self, tier: Tier, info: SegmentInfo, attempt: str, value_schema: ValueSchema | None
    ) -> Manifest:
        """The segment's objects written and verified under ``attempt``; with a table, they
        are its data files (bytes written once), and the table is made or widened
        meanwhile. A cancelled offload (its topic unloaded) waits for the upload: the
        cleanup must find every object it wrote."""
        entries = await self._entries_of(info)
        to_files = tier.iceberg.data_files(self.name, value_schema) if tier.iceberg else None
        writing = to_thread_to_the_end(
            tier.offloader.offload_table, self.name, info, entries, attempt, to_files
        )
        if tier.iceberg is None:
            return await writing
        manifest, _ = await all_to_the_end(
            writing, table_commits.prepare(tier, self.name, value_schema)
        )
        return cast(Manifest, manifest)

    async def _abandon_offload(
        self, started: SegmentInfo, recorded: list[str], keys: list[str]
    ) -> None:
        """Back to CLOSED (the local copy is the truth again), then delete what the attempt
        (the last of ``recorded``; ``keys``: its objects, if known) wrote. If the record
        cannot be written, recovery reverts it at the next start; if the objects cannot be
        deleted, the attempt stays recorded for clean_abandoned. If the Iceberg table cannot
        be checked, the record keeps its intent for the next open. A record that is no
        longer this attempt's (another owner took the segment over) is left alone."""
        segment_id, attempt = started.segment_id, recorded[-1]
        ours = attempts.offloading_by(attempt)
        try:
            info = self._segment(segment_id)
        except MagnetarError as e:  # the partition left this broker
            await self._drop_released(started, attempt, keys, e)
            return
        if info is None or not ours(info):
            await self._drop_superseded(started, info, attempt, keys)
            return
        if self.tier is not None and not await table_commits.undo(self, self.tier, segment_id):
            with contextlib.suppress(MagnetarError):
                await self.storage.update_segment(
                    self.name,
                    segment_id,
                    expect=ours,
                    state=SegmentState.CLOSED,
                    offload=info.offload,
                )
            return
        try:
            await self.storage.update_segment(
                self.name,
                segment_id,
                expect=ours,
                state=SegmentState.CLOSED,
                offload={"attempts": recorded},
            )
        except MagnetarError as e:
            log.warning("cannot mark segment %s of %s CLOSED again: %s", segment_id, self.name, e)
            return
        await self._clean_segment(segment_id)

    async def _drop_released(
        self, started: SegmentInfo, attempt: str, keys: list[str], why: Exception
    ) -> None:
        """An attempt cut off because this broker lost the partition (``release``). Its
        next owner reverts the record and deletes every attempt the record lists; but one
        it no longer lists (cleaned before this attempt's upload ended, the broker stalled)
        would be found by nobody again: its objects are dropped here."""
        segment_id = started.segment_id
        for pause in RECORD_READ_PAUSES:  # the broker's session is being replaced meanwhile
            try:
                info = await self.storage.recorded(self.name, segment_id)
                break
            except MagnetarError as e:
                failed = e
                await asyncio.sleep(pause)
        else:
            log.warning(
                "%s: offload of segment %s abandoned (%s); its record cannot be read, its "
                "attempt %s may leave objects: %s",
                self.name,
                segment_id,
                why,
                attempt,
                failed,
            )
            return
        if info is not None and attempt in attempts.attempts_of(info):
            log.warning(
                "%s: offload of segment %s abandoned (%s): the next owner cleans it up",
                self.name,
                segment_id,
                why,
            )
            return
        await self._drop_superseded(started, info, attempt, keys)

    async def _drop_superseded(
        self, started: SegmentInfo, info: SegmentInfo | None, attempt: str, keys: list[str]
    ) -> None:
        """An offload attempt that lost its segment's record to another owner meanwhile (the
        bundle handed over and back, or the segment trimmed): that owner decides about the
        segment, and nothing reads this attempt's objects unless the owner adopted its
        commit (then the record is OFFLOADED from it). Otherwise they are deleted: out of
        the table first, then the objects (by clean_abandoned's rules while the record
        still lists the attempt, directly once it does not)."""
        segment_id = started.segment_id
        if info is not None and attempts.live_attempt(info, uploading=False) == attempt:
            return
        log.warning(
            "%s: segment %s changed hands while offload attempt %s ran: its objects are dropped",
            self.name,
            segment_id,
            attempt,
        )
        if self.tier is None:
            return
        await table_commits.remove_superseded(self, self.tier, started, attempt, keys)
        if info is not None and attempt in attempts.attempts_of(info):
            await self._clean_segment(segment_id)
            return
        try:
            await asyncio.to_thread(
                self.tier.offloader.delete_attempt, self.name, segment_id, attempt
            )
        except MagnetarError as e:
            log.warning(
                "objects of offload attempt %s of segment %s of %s stay: %s",
                attempt,
                segment_id,
                self.name,
                e,
            )

    async def clean_abandoned(self) -> int:
        """Delete the objects of every abandoned offload attempt this ledger recorded (a
        failed upload, one cut off by a crash); returns how many attempts were cleaned.
        Intents left in segment records are settled against the table first.

        Only recorded attempts are touched, so a shared bucket's other data is safe. A
        deletion that fails is logged and the attempt stays recorded for the next call.
        """
        await self.settled()
        return await self._clean_abandoned()

    async def _clean_abandoned(self) -> int:
        cleaned = 0
        for info in self.segments():
            if self.tier is not None and "compaction" in (info.offload or {}):
                await table_commits.settle_compaction(self, self.tier, info)
                info = self._segment(info.segment_id) or info
            if self.tier is not None and table_commits.pending(info):
                settled = await table_commits.reconcile(self, self.tier, info)
                if settled is None:
                    continue  # the table cannot tell now: keep every object of the segment
            elif (
                self.tier is not None
                and table_commits.unregistered(info)
                and (table_commits.intent_of(info) is not None)
            ):
                await table_commits.settle_registration(self, self.tier, info)
            cleaned += await self._clean_segment(info.segment_id)
        return cleaned

    async def _clean_segment(self, segment_id: int) -> int:
        info = self._segment(segment_id)
        if info is None or self.tier is None:
            return 0
        gone = attempts.abandoned(info, segment_id in self._offloading)
        if not gone:
            return 0
        try:
            for attempt in gone:
                await asyncio.to_thread(
                    self.tier.offloader.delete_attempt, self.name, segment_id, attempt
                )
            await self.storage.update_segment(
                self.name, segment_id, offload=attempts.without(info, gone)
            )
        except MagnetarError as e:
            log.warning(
                "objects of an abandoned offload of segment %s of %s stay: %s",
                segment_id,
                self.name,
                e,
            )
            return 0
        return len(gone)

    async def _entries_of(self, info: SegmentInfo) -> list[Entry]:
        out: list[Entry] = []
        offset = info.first_offset
        while offset < info.end_offset:
            got = await self.storage.read(self.name, offset, max_entries=10_000, max_bytes=64 << 20)
            got = [e for e in got if e.base_offset < info.end_offset]
            if not got:
                break
            out += got
            offset = got[-1].next_offset
        return out

    async def register_in_table(
        self, segment_id: int, *, value_schema: ValueSchema | None = None
    ) -> SegmentInfo:
        """Commit an OFFLOADED segment's rows to the topic's Iceberg table (one offloaded
        before the catalog was turned on); see ``table_commits.register``."""
        if self.tier is None or self.tier.iceberg is None:
            raise NoObjectStoreError(f"{self.name} has no Iceberg catalog to register in")
        await self.settled()
        return await table_commits.register(self, self.tier, segment_id, value_schema)

    async def compact_table(
        self,
        *,
        target_bytes: int = table_commits.COMPACT_TARGET_BYTES,
        min_files: int = table_commits.COMPACT_MIN_FILES,
    ) -> int:
        """Table maintenance (see ``table_commits.compact``): runs of at least ``min_files``
        small neighbouring segments' data files rewritten as one file of at most
        ``target_bytes``; returns how many files went (0 without a catalog)."""
        if self.tier is None or self.tier.iceberg is None:
            return 0
        await self.settled()
        async with self._compacting:
            for seg in self.segments():
                if not await table_commits.settle_compaction(self, self.tier, seg):
                    return 0
            return await table_commits.compact(self, self.tier, target_bytes, min_files)

    async def expire_table_snapshots(self, *, max_age_ms: int, keep: int) -> int:
        """Table maintenance (see ``table_commits.expire_snapshots``); 0 without a tier."""
        if self.tier is None:
            return 0
        return await table_commits.expire_snapshots(self, self.tier, max_age_ms, keep)

    async def drop_local_copy(self, segment_id: int) -> None:
        """Delete the local files of an OFFLOADED segment; durable when this returns, and
        its reads (even ones already under way) go to the object store from then on."""
        await self.storage.drop_local_copy(self.name, segment_id)

    async def trim(self, before: int) -> list[SegmentInfo]:
        """Delete the whole segments before ``before`` (a prefix of the log, stopping at an
        OFFLOADING one): their records and local files, then their objects.

        Durable when this returns for the records: readers positioned in a deleted segment
        get OffsetOutOfRangeError. An object whose deletion fails is logged and left.
        """
        await self.settled()
        async with self._compacting:
            if self.tier is not None:
                for seg in self.segments():
                    if not await table_commits.settle_compaction(self, self.tier, seg):
                        raise IcebergCommitError(
                            f"{self.name}: a table compaction cannot be settled now (is the "
                            "catalog reachable?); retention waits"
                        )
                before = table_commits.compacted_run_start(self.segments(), before)
                await table_commits.remove_trimmed(self, self.tier, before)
            deleted = await self.storage.trim(self.name, before)
            if self.tier is not None:
                for seg in deleted:
                    await self._delete_objects(self.tier, seg)
            self._refresh()
            return deleted

    async def delete(self) -> None:
        """Delete the whole ledger: every segment's objects, then its records and files.

        Durable when this returns; the ledger is not usable afterwards. An object whose
        deletion fails is logged and left."""
        await self.settled()
        if self.tier is not None:
            await table_commits.remove_all(self, self.tier)
            for seg in self.segments():
                await self._delete_objects(self.tier, seg)
        if self.storage.has_partition(self.name):
            await self.storage.delete_partition(self.name)

    async def _delete_objects(self, tier: Tier, seg: SegmentInfo) -> None:
        """Every object recorded for ``seg``: its offloaded copy and any attempt's."""
        if seg.offload is None:
            return
        try:
            if seg.state is SegmentState.OFFLOADED or seg.offload.get("key"):
                keys = keys_of(self.name, seg)
                tier.reader.forget(keys)
                for key in keys:
                    await asyncio.to_thread(tier.offloader.delete, key)
            for attempt in attempts.attempts_of(seg):
                await asyncio.to_thread(
                    tier.offloader.delete_attempt, self.name, seg.segment_id, attempt
                )
            for table_file in (seg.offload.get("iceberg") or {}).get("files", []):
                await asyncio.to_thread(tier.store.delete, table_file)  # outside any attempt
        except MagnetarError as e:
            log.warning(
                "objects of deleted segment %s of %s stay: %s", seg.segment_id, self.name, e
            )

    def segments(self) -> list[SegmentInfo]:
        return self.storage.segments(self.name)

    async def unload(self) -> None:
        """This broker hands the partition over: its offloads in flight are cancelled and
        awaited (each puts its segment back to CLOSED), then its open segment is closed."""
        tasks = [t for t in self._offload_tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.storage.unload(self.name)

    def release(self) -> None:
        """This broker stops writing the partition (it lost ownership); see LedgerStorage.
        Its offloads in flight are cancelled: their segments are the next owner's to
        recover."""
        for task in self._offload_tasks:
            task.cancel()
        self.storage.release(self.name)

    async def check(self, *, repair: bool = False) -> list[dict[str, Any]]:
        """Verify every stored entry of this partition (see LedgerStorage.check)."""
        return await self.storage.check(self.name, repair=repair)

    def damaged(self) -> dict[int, str]:
        return self.storage.damaged(self.name)

    async def next_readable(self, offset: int) -> int:
        """The first offset after damage at ``offset`` that reads (see LedgerStorage)."""
        return await self.storage.next_readable(self.name, offset)

    async def replica_reads(self, segment_id: int) -> list[dict[str, Any]] | None:
        """``[{"first", "end", "flight": [URLs]}]``: storage nodes that serve the closed
        segment's offset ranges over Arrow Flight, or None (read it through the broker)."""
        return await self.storage.replica_reads(self.name, segment_id)

    def on_append(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every append; returns the function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def wait_beyond(self, offset: int, timeout: float) -> bool:
        """Wait until the ledger holds ``offset`` (True) or ``timeout`` passes (False)."""
        if self.end_offset > offset:
            return True
        event = asyncio.Event()
        remove = self.on_append(event.set)
        try:
            async with asyncio.timeout(timeout):
                while self.end_offset <= offset:
                    await event.wait()
                    event.clear()
            return True
        except TimeoutError:
            return False
        finally:
            remove()
