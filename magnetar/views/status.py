"""What ``GET /views/{name}`` answers: state, progress, lag, offsets, version, error."""

from __future__ import annotations

import time
from typing import Any

from magnetar.views.model import Offsets, ViewState
from magnetar.views.records import AsOfRecord, VersionRecord, ViewRecord
from magnetar.views.runner import ViewRunner
from magnetar.views.stores.base import StateStore


def describe(
    record: ViewRecord,
    runner: ViewRunner | None,
    pending: ViewRunner | None,
    ends: Offsets | None,
) -> dict[str, Any]:
    out = _version(record.current, runner, ends)
    out["name"] = record.name
    if record.pending is not None:
        out["pending"] = _version(record.pending, pending, ends)
    return out


def _version(record: VersionRecord, runner: ViewRunner | None, ends: Offsets | None) -> Any:
    failed = record.failed.to_json() if record.failed is not None else None
    state = runner.state if runner is not None else ViewState.CREATED
    if failed and state != ViewState.FAILED:
        state = ViewState.FAILED
    position = runner.position if runner is not None else None
    progress = runner.progress() if runner is not None else 0.0
    target = runner.target if runner is not None else record.bootstrap["target"]
    out: dict[str, Any] = {
        "version": record.version,
        "definition": record.definition,
        "state": state.value,
        "progress": progress,
        "offsets": position.offsets if position else {},
        "batchId": position.batch_id if position else -1,
        # the sources' end offsets now (was: frozen at creation), and what the view must
        # have applied to be LIVE (creation high-water mark, or the ends at its restart)
        "highWaterMark": ends if ends is not None else target,
        "catchUpTarget": target,
        "events": _events(record.bootstrap["start"], target, progress),
        "error": (runner.error if runner and runner.error else None) or (failed or {}).get("error"),
        "failedAt": (runner.failed_at if runner and runner.failed_at else None)
        or (failed or {}).get("at"),
    }
    # messages applied whose value did not parse as the topic's JSON schema (data = null)
    unparsed = runner.unparsed() if runner is not None else None
    out["unparsed"] = unparsed.count if unparsed else 0
    out["firstUnparsed"] = unparsed.first if unparsed else None
    if runner is not None:
        out["dataset"], out["lastBatchMs"] = runner.dataset, runner.last_batch()
        out["sourceColumns"] = runner.columns
        out["restarts"] = runner.restarts  # its query died inside Spark and was started again
    if ends is not None and position is not None:
        out["lag"] = lag(position.offsets, record.bootstrap["start"], ends, position)
    return out


def _events(start: Offsets, target: Offsets, share: float) -> dict[str, int]:
    """The backfill (or catch-up) in events: the history up to the catch-up target, and how
    much of it is applied."""
    total = _sum(target) - _sum(start)
    return {"total": max(0, total), "applied": int(share * max(0, total))}


def _sum(offsets: Offsets) -> int:
    return sum(o for parts in offsets.values() for o in parts.values())


def lag(at: Offsets, start: Offsets, ends: Offsets, position: Any) -> dict[str, int]:
    """Messages not yet applied, and how long ago the view last committed when behind."""
    behind = 0
    for topic, parts in ends.items():
        for p, end in parts.items():
            done = at.get(topic, {}).get(p, start.get(topic, {}).get(p, 0))
            behind += max(0, end - done)
    since = int(time.time() * 1000) - position.committed_ms if position.committed_ms else 0
    return {"messages": behind, "ms": since if behind else 0}


def describe_virtual(record: AsOfRecord, store: StateStore) -> dict[str, Any]:
    return {
        "name": record.name,
        "state": ViewState.VIRTUAL.value,
        "of": record.of,
        "at": record.at,
        "definition": record.definition,
        "rows": store.count(record.dataset),
        "dataset": record.dataset,
        "version": None,
        "error": None,
    }
