"""An in-process :class:`MetadataStore` in a dict, for tests; nothing survives the process.

The contract's rules (path syntax, expected versions, implicit parents, watch dispatch) live
in :mod:`magnetar.meta.rules`, shared with the SQLite backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.errors import ClosedError
from magnetar.meta.base import MetadataStore, Notification, Op, Stat, Versioned, Watcher
from magnetar.meta.rules import (
    WatchRegistry,
    check_op,
    check_prefix,
    check_version,
    child_names,
    children_prefix,
    next_stat,
)


class MemoryMetadataStore(MetadataStore):
    """The contract in a dict. "Durable" here means: until this object is garbage.

    Calls never suspend, so each one is atomic with respect to other coroutines.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._nodes: dict[str, Versioned] = {}
        self._watches = WatchRegistry()
        self._closed = False

    async def get(self, path: str) -> Versioned | None:
        """The value and stat at ``path``, or None. ``/`` is accepted and never has a value."""
        self._check_open()
        check_prefix(path)
        return self._nodes.get(path)

    async def put(self, path: str, value: bytes, *, expected_version: int | None = None) -> Stat:
        """Write ``value``; visible to every later call when this returns."""
        op = Op(path, value, expected_version)
        self._check_open()
        check_op(op)
        note = _apply(self._nodes, op, self._clock.now_ms())
        self._watches.notify([note])
        return self._nodes[path].stat

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        """Delete the node (not its children); gone for every later call when this returns."""
        op = Op(path, None, expected_version)
        self._check_open()
        check_op(op)
        note = _apply(self._nodes, op, self._clock.now_ms())
        self._watches.notify([note])

    async def list_children(self, path: str) -> list[str]:
        """Sorted names of the direct children of ``path`` (parents are implicit)."""
        self._check_open()
        check_prefix(path)
        return child_names(children_prefix(path), self._nodes)

    async def multi(self, ops: Sequence[Op]) -> None:
        """Apply every op, or none of them (raising the first failing op's error)."""
        self._check_open()
        ops = list(ops)
        for op in ops:
            check_op(op)
        nodes = dict(self._nodes)  # work on a copy: a failing op leaves self._nodes untouched
        now = self._clock.now_ms()
        notes = [_apply(nodes, op, now) for op in ops]
        self._nodes = nodes
        self._watches.notify(notes)

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        """Call ``callback`` after each change at or under ``prefix`` made through this store.

        The callbacks of a change have run by the time the call that made it returns.
        """
        self._check_open()
        check_prefix(prefix)
        return self._watches.add(prefix, callback)

    async def aclose(self) -> None:
        """Drop the watches; later calls raise ClosedError. Closing twice is fine."""
        self._closed = True
        self._watches.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this memory metadata store is closed; open a new one")


def _apply(nodes: dict[str, Versioned], op: Op, now_ms: int) -> Notification:
    """Apply one checked op to ``nodes``; raises before changing anything if it may not apply."""
    current = nodes.get(op.path)
    current_stat = current.stat if current else None
    check_version(op.path, current_stat, op)
    if op.value is None:
        del nodes[op.path]
        return Notification(op.path, "deleted")
    nodes[op.path] = Versioned(op.value, next_stat(current_stat, now_ms))
    return Notification(op.path, "created" if current is None else "modified")
