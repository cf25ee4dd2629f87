"""An in-process :class:`MetadataStore` in a dict, for tests; nothing survives the process.

The first half of this module holds the contract's rules (path syntax, expected versions,
implicit parents, watch dispatch) as plain functions, so every backend applies them the
same way; the SQLite backend imports them from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.errors import ClosedError
from magnetar.meta.base import MetadataStore, Notification, Op, Stat, Versioned, Watcher
from magnetar.meta.errors import BadVersionError, MetadataError, NodeExistsError, NotFoundError

logger = logging.getLogger(__name__)

ROOT = "/"

# --- The contract's rules, shared by every backend ---------------------------------------


def check_node_path(path: str) -> None:
    """Raise MetadataError unless ``path`` can name a node: ``/a/b``, not ``/``, ``a``, ``/a/``."""
    check_prefix(path)
    if path == ROOT:
        raise MetadataError("the root path '/' holds no value; use a path like '/name'")


def check_prefix(path: str) -> None:
    """Like :func:`check_node_path`, but also accepts the root ``/`` (for lists and watches)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise MetadataError(f"metadata path {path!r} must start with '/', like '/a/b'")
    if path == ROOT:
        return
    if path.endswith("/"):
        raise MetadataError(
            f"metadata path {path!r} must not end with '/'; use {path.rstrip('/')!r}"
        )
    if "//" in path:
        raise MetadataError(f"metadata path {path!r} has an empty component ('//')")
    if "\0" in path:
        raise MetadataError(f"metadata path {path!r} contains a NUL character")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MetadataError(f"metadata path {path!r} is not valid Unicode: {e}") from e


def check_op(op: Op) -> None:
    """Raise MetadataError if ``op`` is malformed, before anything is read or written."""
    check_node_path(op.path)
    if op.value is not None and not isinstance(op.value, bytes):
        raise MetadataError(f"value for {op.path} must be bytes, not {type(op.value).__name__}")
    expected = op.expected_version
    lowest = -1 if op.value is not None else 0
    if expected is not None and (not isinstance(expected, int) or expected < lowest):
        what = "put" if op.value is not None else "delete"
        allowed = "None, -1 (create) or a version >= 0" if lowest == -1 else "None or >= 0"
        raise MetadataError(f"{what} {op.path}: expected_version {expected!r} is not {allowed}")


def check_version(path: str, current: Stat | None, op: Op) -> None:
    """Raise the contract's error if ``op`` may not apply to a node whose stat is ``current``."""
    expected = op.expected_version
    if current is None:
        if op.value is None or (expected is not None and expected >= 0):
            raise NotFoundError(f"no metadata node at {path}")
    elif expected == -1:
        raise NodeExistsError(
            f"{path} already exists (version {current.version}); "
            "put without expected_version=-1 to overwrite it"
        )
    elif expected is not None and expected != current.version:
        raise BadVersionError(
            f"{path} is at version {current.version}, not {expected}: "
            "someone else wrote it first; re-read and retry"
        )


def next_stat(current: Stat | None, now_ms: int) -> Stat:
    """The stat a put gives a node: version 0 when created, then one more per put."""
    if current is None:
        return Stat(version=0, created_ms=now_ms, modified_ms=now_ms)
    return Stat(version=current.version + 1, created_ms=current.created_ms, modified_ms=now_ms)


def children_prefix(path: str) -> str:
    """What every path under ``path`` starts with: ``/a`` → ``/a/``, ``/`` → ``/``."""
    return path if path == ROOT else path + "/"


def child_names(prefix: str, paths: Iterable[str]) -> list[str]:
    """Sorted distinct first components after ``prefix`` of the ``paths`` that start with it."""
    return sorted({p[len(prefix) :].split("/", 1)[0] for p in paths if p.startswith(prefix)})


def is_at_or_under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(children_prefix(prefix))


class WatchRegistry:
    """The watches of one store handle; callbacks run on the caller's (event loop) thread."""

    def __init__(self) -> None:
        self._watches: list[tuple[str, Watcher]] = []

    def add(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        """Register ``callback``; the returned function removes it (calling it twice is fine)."""
        entry = (prefix, callback)
        self._watches.append(entry)

        def cancel() -> None:
            if entry in self._watches:
                self._watches.remove(entry)

        return cancel

    def notify(self, notifications: Iterable[Notification]) -> None:
        """Call every matching callback, in order of the changes, then of registration.

        The changes are committed already, so a failing callback must not make the write
        look failed to its caller, nor starve the other watchers: it is logged and skipped.
        """
        for note in notifications:
            for prefix, callback in list(self._watches):
                if not is_at_or_under(note.path, prefix):
                    continue
                try:
                    callback(note)
                except Exception:
                    logger.exception("metadata watcher %r failed on %s", callback, note)

    def clear(self) -> None:
        self._watches.clear()


# --- The in-memory backend -----------------------------------------------------------------


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
