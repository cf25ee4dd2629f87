"""Offload attempts: what a segment record says about the objects written for it.

Before an offload uploads anything, the managed ledger records a new attempt id in the
segment record (``offload["attempts"]``, oldest first). So every object Magnetar ever wrote
for a segment can be found again by its attempt id, and cleanup deletes exactly the attempts
it recorded and nothing else — never "whatever the bucket holds that we do not recognise",
which in a bucket shared by several clusters is somebody else's data.

The *live* attempt is the one whose object the segment reads from (OFFLOADED) or which is
uploading right now (OFFLOADING, in this process); every other recorded attempt is
abandoned: a failed or cut-off upload whose objects may still be in the store.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from magnetar.storage import SegmentInfo, SegmentState


def new_attempt() -> str:
    return uuid.uuid4().hex[:16]


def attempts_of(info: SegmentInfo) -> list[str]:
    return [str(a) for a in (info.offload or {}).get("attempts", [])]


def live_attempt(info: SegmentInfo, uploading: bool) -> str | None:
    """The attempt the segment's record depends on, if any."""
    attempts = attempts_of(info)
    if not attempts:
        return None
    if info.state is SegmentState.OFFLOADED or (
        info.state is SegmentState.OFFLOADING and uploading
    ):
        return attempts[-1]
    return None


def offloading_by(attempt: str) -> Callable[[SegmentInfo], bool]:
    """A check for ``update_segment(expect=...)``: the segment is still being offloaded by
    ``attempt`` (OFFLOADING, and ``attempt`` the latest recorded). It fails once another
    owner of the partition reverted the segment or started an attempt of its own."""

    def check(info: SegmentInfo) -> bool:
        return info.state is SegmentState.OFFLOADING and attempts_of(info)[-1:] == [attempt]

    return check


def abandoned(info: SegmentInfo, uploading: bool) -> list[str]:
    live = live_attempt(info, uploading)
    return [a for a in attempts_of(info) if a != live]


def without(info: SegmentInfo, gone: list[str]) -> dict[str, Any] | None:
    """The record's offload details once the ``gone`` attempts' objects are deleted."""
    details = dict(info.offload or {})
    left = [a for a in attempts_of(info) if a not in gone]
    if left:
        details["attempts"] = left
    else:
        details.pop("attempts", None)
    return details or None
