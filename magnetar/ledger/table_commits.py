"""Offloaded segments committed to the topic's Iceberg table, exactly once.

The order, each step durable before the next::

    1. the segment's objects — the table's data files, typed columns beside the columns
       that rebuild its entries — are written under the attempt's prefix and verified
       (the OFFLOADED rule); the table is created or its schema widened;
    2. the *intent* is recorded in the segment record: ``offload["iceberg"]`` names the
       attempt and its files, ``committed: false`` (state still OFFLOADING);
    3. one append snapshot registers the files (its summary names segment and offsets);
    4. the segment is marked OFFLOADED with ``committed: true`` and the snapshot id.

A crash between 2 and 4 leaves a CLOSED segment (recovery reverts OFFLOADING) with an intent.
When its ledger opens, :func:`reconcile` asks the table (in the background: a slow catalog
does not hold up the topic's load; every later call that changes offload records or the
table waits for it, see ``ManagedLedger.settled``): if it references every file of the
intent, the commit happened and the segment is marked OFFLOADED (its object was verified in
step 1), so it is offloaded once; if it references none, the intent is dropped and the
attempt's objects are deleted as any abandoned attempt's. Either way no data file is in the
table twice and none it references is missing. Retention removes a segment's files from the
table (an overwrite snapshot) before the segment record and its objects are deleted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from magnetar.core.futures import to_thread_to_the_end
from magnetar.ledger import offload_attempts as attempts
from magnetar.storage import SegmentInfo, SegmentState
from magnetar.tier import (
    IcebergCommitError,
    SegmentFiles,
    Tier,
    ValueSchema,
    attempt_prefix,
)
from magnetar.tier.iceberg import identifier

if TYPE_CHECKING:
    from magnetar.ledger.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)


def intent_of(info: SegmentInfo) -> dict[str, Any] | None:
    found = (info.offload or {}).get("iceberg")
    return dict(found) if isinstance(found, dict) else None


def pending(info: SegmentInfo) -> bool:
    """True for a CLOSED segment whose record holds an intent never marked committed."""
    intent = intent_of(info)
    return intent is not None and not intent.get("committed") and info.state is SegmentState.CLOSED


def files_of(partition: str, info: SegmentInfo) -> SegmentFiles | None:
    """The data files the segment record says were written (committed or only intended)."""
    intent = intent_of(info)
    if intent is None:
        return None
    return SegmentFiles(
        partition,
        info.segment_id,
        info.first_offset,
        info.last_offset,
        str(intent["attempt"]),
        tuple(str(k) for k in intent.get("files", [])),
    )


async def prepare(tier: Tier, partition: str, value_schema: ValueSchema | None) -> None:
    """Step 1's table part: the partition's table created, or its schema widened to
    ``value_schema``'s columns. It runs while the data files are written, and a cancelled
    caller waits for it to end."""
    assert tier.iceberg is not None
    await to_thread_to_the_end(tier.iceberg.prepare_table, partition, value_schema)


async def commit(
    ledger: ManagedLedger,
    tier: Tier,
    info: SegmentInfo,
    attempt: str,
    keys: list[str],
    details: dict[str, Any],
) -> dict[str, Any]:
    """Steps 2–3 for a segment whose objects ``keys`` (its data files, written with
    ``tier.iceberg.data_files``) are verified and whose table is :func:`prepare`d; returns
    the ``offload["iceberg"]`` record of step 4. The intent is recorded only while
    ``attempt`` still offloads the segment (SegmentChangedError otherwise: another owner
    took it over). On failure the caller abandons the attempt (:func:`undo` first)."""
    assert tier.iceberg is not None
    intent = {"attempt": attempt, "files": keys, "committed": False}
    await ledger.storage.update_segment(
        ledger.name,
        info.segment_id,
        expect=attempts.offloading_by(attempt),
        offload={**details, "iceberg": intent},
    )
    files = attempt_files(ledger.name, info, attempt, keys)
    iceberg = tier.iceberg

    def commit_or_say_why() -> int:  # said here: a cancelled caller never sees the error
        try:
            return iceberg.commit(files)
        except IcebergCommitError as e:
            log.warning("%s: segment %s is not offloaded: %s", ledger.name, info.segment_id, e)
            raise

    # a cancelled offload waits for its commit: the undo that follows must see it
    snapshot = await to_thread_to_the_end(commit_or_say_why)
    return {
        **intent,
        "committed": True,
        "snapshot": snapshot,
        "table": ".".join(identifier(ledger.name)),
    }


def attempt_files(partition: str, info: SegmentInfo, attempt: str, keys: list[str]) -> SegmentFiles:
    """The data files ``keys`` one offload ``attempt`` of segment ``info`` wrote."""
    intent = {"attempt": attempt, "files": keys, "committed": False}
    files = files_of(partition, dataclasses.replace(info, offload={"iceberg": intent}))
    assert files is not None
    return files


async def remove_superseded(
    ledger: ManagedLedger, tier: Tier, info: SegmentInfo, attempt: str, keys: list[str]
) -> None:
    """Take out of the table the files of an attempt that lost its segment to another
    owner (a handover while it ran). That owner settled the segment without them, so a
    commit of theirs that landed late must go, or the table would reference files the
    owner deletes (and hold the offsets twice once the segment is offloaded again). Files
    not in the table are skipped; a catalog that cannot be reached is logged."""
    if tier.iceberg is None or not keys:
        return
    try:
        await asyncio.to_thread(
            tier.iceberg.remove, [attempt_files(ledger.name, info, attempt, keys)], "abandon"
        )
    except Exception as e:  # the catalog's own errors are not MagnetarErrors
        log.error(
            "%s: segment %s's superseded offload attempt %s may still be in the table: %s",
            ledger.name,
            info.segment_id,
            attempt,
            e,
        )


async def undo(ledger: ManagedLedger, tier: Tier, segment_id: int) -> bool:
    """Make sure the table does not reference what a failed attempt of the segment wrote
    (its commit may have happened before the failure). False when that cannot be known
    now (the catalog is down): the intent must then stay recorded for :func:`reconcile`."""
    info = ledger._segment(segment_id)
    files = files_of(ledger.name, info) if info is not None else None
    if files is None or not files.keys:
        return True
    if tier.iceberg is None:
        return False
    try:
        await asyncio.to_thread(tier.iceberg.remove, [files], "abandon")
    except Exception as e:  # the catalog's own errors are not MagnetarErrors
        log.warning("cannot check %s's table for an abandoned offload: %s", ledger.name, e)
        return False
    return True


async def reconcile(ledger: ManagedLedger, tier: Tier, info: SegmentInfo) -> SegmentInfo | None:
    """At open: settle a CLOSED segment's uncommitted intent against the table. Returns
    the new record (OFFLOADED, or CLOSED without the intent), or None when the catalog
    cannot answer now (nothing changes; the attempt's objects are kept)."""
    files = files_of(ledger.name, info)
    if files is None or info.state is not SegmentState.CLOSED or tier.iceberg is None:
        return None
    try:
        present = await asyncio.to_thread(tier.iceberg.referenced, files)
        uris = {tier.iceberg.uri(k) for k in files.keys}
        offload = dict(info.offload or {})
        if files.keys and present == uris and offload.get("key"):
            snapshot = await asyncio.to_thread(tier.iceberg.commit, files)  # adds nothing
            offload["iceberg"] = {
                **offload["iceberg"],
                "committed": True,
                "snapshot": snapshot,
                "table": ".".join(identifier(ledger.name)),
            }
            log.info(
                "segment %s of %s: Iceberg commit found, OFFLOADED", info.segment_id, ledger.name
            )
            return await ledger.storage.update_segment(
                ledger.name, info.segment_id, state=SegmentState.OFFLOADED, offload=offload
            )
        # Not (wholly) committed: out of the table for good. The broker that ran the attempt
        # may only be stalled, its commit still to come, after this owner deleted the files.
        await asyncio.to_thread(tier.iceberg.fence, files)
    except Exception as e:
        log.warning(
            "cannot reconcile segment %s of %s with its table: %s", info.segment_id, ledger.name, e
        )
        return None
    offload.pop("iceberg", None)
    for name in ("key", "objects", "sha256", "rows", "size", "offloadedMs", "store"):
        offload.pop(name, None)  # the object of an attempt that did not finish
    return await ledger.storage.update_segment(
        ledger.name, info.segment_id, offload=offload or None
    )


async def settle_before_offload(
    ledger: ManagedLedger, tier: Tier, segment_id: int
) -> SegmentInfo | None:
    """Before a new offload attempt: an earlier attempt whose commit could not be undone
    (the catalog was down) left its intent. Settle it against the table first, or a second
    commit would add the same offsets twice. Returns the OFFLOADED record when the earlier
    commit is in the table, None when the new attempt may go ahead; raises
    IcebergCommitError (retriable) while the table cannot tell."""
    info = ledger._segment(segment_id)
    if info is None or not pending(info):
        return None
    settled = await reconcile(ledger, tier, info)
    if settled is None:
        raise IcebergCommitError(
            f"segment {segment_id} of {ledger.name}: an earlier offload's Iceberg commit "
            "cannot be checked now (is the catalog reachable?); retrying later"
        )
    if settled.state is SegmentState.OFFLOADED:
        return settled
    await ledger._clean_segment(segment_id)  # the earlier attempt's objects, now unreferenced
    return None


def unregistered(info: SegmentInfo) -> bool:
    """An OFFLOADED segment whose rows are not in the table: offloaded before the catalog
    was turned on (or a registration cut off by a crash)."""
    intent = intent_of(info)
    return info.state is SegmentState.OFFLOADED and not (intent and intent.get("committed"))


async def register(
    ledger: ManagedLedger, tier: Tier, segment_id: int, value_schema: ValueSchema | None
) -> SegmentInfo:
    """Commit an OFFLOADED segment's rows to the table from its object (the backfill of
    history offloaded before the catalog). The same order as an offload: files, intent,
    commit, mark; a registration cut off by a crash is settled at the next open."""
    assert tier.iceberg is not None
    info = ledger._segment(segment_id)
    if info is None or not unregistered(info):
        raise IcebergCommitError(f"segment {segment_id} of {ledger.name} needs no registration")
    if intent_of(info) is not None:
        info = await settle_registration(ledger, tier, info)
        if info is None or not unregistered(info):
            raise IcebergCommitError(
                f"segment {segment_id} of {ledger.name}: an earlier registration cannot be "
                "checked now (is the catalog reachable?); retrying later"
            )
    rows = await asyncio.to_thread(tier.reader.layout, ledger.name, info)
    live = attempts.live_attempt(info, uploading=False)
    prefix = (
        attempt_prefix(ledger.name, segment_id, live)
        if live
        else f"{ledger.name}/{segment_id:020d}/table"  # a segment offloaded before attempts
    )
    keys = await asyncio.to_thread(
        tier.iceberg.write_files, ledger.name, segment_id, prefix, rows, value_schema
    )
    # an id of its own, so that a next owner settling this registration can fence it
    intent = {"attempt": f"register-{attempts.new_attempt()}", "files": keys, "committed": False}
    offload = dict(info.offload or {})
    info = await ledger.storage.update_segment(
        ledger.name, segment_id, offload={**offload, "iceberg": intent}
    )
    files = files_of(ledger.name, info)
    assert files is not None
    snapshot = await asyncio.to_thread(tier.iceberg.commit, files)
    done = {
        **intent,
        "committed": True,
        "snapshot": snapshot,
        "table": ".".join(identifier(ledger.name)),
    }
    return await ledger.storage.update_segment(
        ledger.name, segment_id, offload={**offload, "iceberg": done}
    )


async def settle_registration(
    ledger: ManagedLedger, tier: Tier, info: SegmentInfo
) -> SegmentInfo | None:
    """An OFFLOADED segment's registration that never got marked: committed (every file in
    the table) → marked; otherwise its files leave the table and the store and the intent
    goes, for a later registration. None when the catalog cannot tell now."""
    files = files_of(ledger.name, info)
    if files is None or tier.iceberg is None:
        return None
    offload = dict(info.offload or {})
    try:
        present = await asyncio.to_thread(tier.iceberg.referenced, files)
        if files.keys and present == {tier.iceberg.uri(k) for k in files.keys}:
            offload["iceberg"] = {
                **offload["iceberg"],
                "committed": True,
                "table": ".".join(identifier(ledger.name)),
            }
        else:
            # out of the table for good: the broker that registered may only be stalled
            await asyncio.to_thread(tier.iceberg.fence, files)
            for key in files.keys:
                await asyncio.to_thread(tier.store.delete, key)
            offload.pop("iceberg", None)
    except Exception as e:
        log.warning(
            "cannot settle segment %s of %s with its table: %s", info.segment_id, ledger.name, e
        )
        return None
    return await ledger.storage.update_segment(ledger.name, info.segment_id, offload=offload)


async def remove_trimmed(ledger: ManagedLedger, tier: Tier, before: int) -> None:
    """Before retention trims the segments wholly before ``before``: their files leave the
    table (one overwrite snapshot). Raises if the catalog cannot take it: nothing is
    trimmed then, so the table never references a deleted file."""
    if tier.iceberg is None:
        return
    doomed = []
    for seg in ledger.segments()[:-1]:
        if seg.end_offset > before or seg.state in (SegmentState.OPEN, SegmentState.OFFLOADING):
            break
        files = files_of(ledger.name, seg)
        if files is not None and files.keys:
            doomed.append(files)
    if doomed:
        await asyncio.to_thread(tier.iceberg.remove, doomed, "retention")


async def expire_snapshots(ledger: ManagedLedger, tier: Tier, max_age_ms: int, keep: int) -> int:
    """Table maintenance: expire the table's snapshots older than ``max_age_ms`` but the
    ``keep`` newest; 0 without a catalog or a table."""
    if tier.iceberg is None:
        return 0
    older_than = int(time.time() * 1000) - max_age_ms
    return await asyncio.to_thread(tier.iceberg.expire_snapshots, ledger.name, older_than, keep)


# -- compaction -------------------------------------------------------------------------

COMPACT_TARGET_BYTES = 128 << 20
COMPACT_MIN_FILES = 5  # Iceberg's rewrite_data_files min-input-files
DAY_MS = 86_400_000


def _day(info: SegmentInfo) -> int:
    return info.first_publish_time // DAY_MS


def compactable(info: SegmentInfo, target_bytes: int) -> bool:
    """An OFFLOADED segment whose one object is a committed data file of the table, smaller
    than half the target, lying in one UTC day, not compacted yet."""
    offload = info.offload or {}
    intent = intent_of(info)
    return (
        info.state is SegmentState.OFFLOADED
        and len(offload.get("objects") or []) == 1
        and intent is not None
        and bool(intent.get("committed"))
        and "compaction" not in offload
        and not offload.get("compacted")
        and int(offload.get("size", target_bytes)) < target_bytes // 2
        and _day(info) == info.max_publish_time // DAY_MS
    )


def compaction_groups(
    segments: list[SegmentInfo], target_bytes: int, min_files: int = COMPACT_MIN_FILES
) -> list[list[SegmentInfo]]:
    """Runs of neighbouring compactable segments of one day, each run at most
    ``target_bytes`` and of ``min_files`` segments or more: each becomes one data file."""
    groups: list[list[SegmentInfo]] = []
    run: list[SegmentInfo] = []
    size = 0
    for seg in segments:
        fits = compactable(seg, target_bytes)
        seg_size = int((seg.offload or {}).get("size", 0))
        if run and (not fits or _day(seg) != _day(run[0]) or size + seg_size > target_bytes):
            groups.append(run)
            run, size = [], 0
        if fits:
            run.append(seg)
            size += seg_size
    groups.append(run)
    return [g for g in groups if len(g) >= max(min_files, 2)]


async def compact(
    ledger: ManagedLedger, tier: Tier, target_bytes: int, min_files: int = COMPACT_MIN_FILES
) -> int:
    """Table maintenance: rewrite each run of small neighbouring segments' data files as one
    file, in one replace snapshot per run; returns how many files went. What any offset
    reads does not change: every segment of a run then reads its rows from the new file.

    The order, each step durable before the next: the intent is recorded in the first
    segment's record (``offload["compaction"]``: the new file's key, under
    ``<partition>/<first segment>/compact-<id>/``, the segments, the files replaced); the
    new file is written and verified; the table replaces the old files by the new one;
    each segment's record is pointed at the new file; the old files are deleted and the
    intent dropped. A crash anywhere is settled
    by :func:`settle_compaction` (at open, before retention, before the next compaction)."""
    if tier.iceberg is None:
        return 0
    gone = 0
    for group in compaction_groups(ledger.segments(), target_bytes, min_files):
        first = group[0]
        old = [str((s.offload or {})["objects"][0]) for s in group]
        prefix = attempt_prefix(ledger.name, first.segment_id, f"compact-{attempts.new_attempt()}")
        key = f"{prefix}/iceberg-{_day(first):06d}-0.parquet"
        intent = {"key": key, "segments": [s.segment_id for s in group], "replaces": old}
        info = await ledger.storage.update_segment(
            ledger.name, first.segment_id, offload={**(first.offload or {}), "compaction": intent}
        )
        await asyncio.to_thread(tier.offloader.compact, old, key)
        files = [f for s in group if (f := files_of(ledger.name, s)) is not None]
        await asyncio.to_thread(tier.iceberg.replace, files, key)
        await _finish_compaction(ledger, tier, info, intent)
        gone += len(old) - 1
    return gone


async def _finish_compaction(
    ledger: ManagedLedger, tier: Tier, first: SegmentInfo, intent: dict[str, Any]
) -> None:
    """The table references the compacted file: point every segment of the run at it,
    delete the files it replaced, drop the intent. Idempotent."""
    key = str(intent["key"])
    for segment_id in intent["segments"]:
        info = ledger._segment(int(segment_id))
        if info is None or (info.offload or {}).get("objects") == [key]:
            continue
        offload = dict(info.offload or {})
        offload["objects"] = [key]
        offload["key"] = key
        offload["compacted"] = True
        offload["iceberg"] = {**offload.get("iceberg", {}), "files": [key]}
        if int(segment_id) == first.segment_id:
            offload["compaction"] = intent
        await ledger.storage.update_segment(ledger.name, int(segment_id), offload=offload)
    tier.reader.forget([str(k) for k in intent["replaces"]])
    for old in intent["replaces"]:
        await asyncio.to_thread(tier.store.delete, str(old))
    info = ledger._segment(first.segment_id)
    if info is not None:
        offload = dict(info.offload or {})
        offload.pop("compaction", None)
        await ledger.storage.update_segment(ledger.name, info.segment_id, offload=offload)


async def settle_compaction(ledger: ManagedLedger, tier: Tier, info: SegmentInfo) -> bool:
    """A compaction cut off (crash, catalog error) after its intent was recorded: finish it
    when the table references its file, else delete what it wrote (a temporary upload too) and
    drop the intent. False when the catalog cannot tell now (nothing changes)."""
    intent = (info.offload or {}).get("compaction")
    if not isinstance(intent, dict) or tier.iceberg is None:
        return True
    key = str(intent["key"])
    run = [s for s in ledger.segments() if s.segment_id in set(intent["segments"])]
    last = run[-1] if run else info
    probe = SegmentFiles(
        ledger.name, info.segment_id, info.first_offset, last.last_offset, "", (key,)
    )
    try:
        present = await asyncio.to_thread(tier.iceberg.referenced, probe)
    except Exception as e:  # the catalog's own errors are not MagnetarErrors
        log.warning("cannot settle a compaction of %s: %s", ledger.name, e)
        return False
    if present:
        await _finish_compaction(ledger, tier, info, intent)
        return True
    # Not committed: everything under the compaction's own prefix goes, the file and any
    # temporary upload a crash left beside it (the prefix names this compaction only).
    await asyncio.to_thread(_delete_under, tier, key.rsplit("/", 1)[0] + "/")
    offload = dict(info.offload or {})
    offload.pop("compaction", None)
    await ledger.storage.update_segment(ledger.name, info.segment_id, offload=offload)
    return True


def _delete_under(tier: Tier, prefix: str) -> None:
    for key in tier.store.list(prefix):
        tier.store.delete(key)


def compacted_run_start(segments: list[SegmentInfo], before: int) -> int:
    """Retention trims compacted runs whole: ``before`` lowered to the first offset of a
    run whose file also holds offsets at or after ``before`` (a file is never half
    deleted; the run is kept until its last segment expires)."""
    shared: dict[str, int] = {}
    for seg in segments:
        objects = (seg.offload or {}).get("objects") or []
        if (seg.offload or {}).get("compacted") and objects:
            shared.setdefault(str(objects[0]), seg.first_offset)
            if seg.end_offset > before:
                return min(before, shared[str(objects[0])])
    return before


async def remove_all(ledger: ManagedLedger, tier: Tier) -> None:
    """Before the whole ledger is deleted: its files leave the table."""
    if tier.iceberg is None:
        return
    doomed = [f for s in ledger.segments() if (f := files_of(ledger.name, s)) and f.keys]
    if doomed:
        await asyncio.to_thread(tier.iceberg.remove, doomed, "delete")


__all__ = [
    "COMPACT_MIN_FILES",
    "COMPACT_TARGET_BYTES",
    "commit",
    "compact",
    "compacted_run_start",
    "compaction_groups",
    "expire_snapshots",
    "files_of",
    "intent_of",
    "pending",
    "reconcile",
    "register",
    "remove_all",
    "remove_trimmed",
    "settle_before_offload",
    "settle_compaction",
    "settle_registration",
    "undo",
    "unregistered",
]
