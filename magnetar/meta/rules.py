"""The contract's rules shared by every MetadataStore backend: path checks, versioned
compare-and-set, child listing and watch notification."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from magnetar.meta.base import Notification, Op, Stat, Watcher
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


def deliver(callback: Watcher, note: Notification) -> None:
    """Call one watcher; its failure is logged, never raised into the writer."""
    try:
        callback(note)
    except Exception:
        logger.exception("metadata watcher %r failed on %s", callback, note)


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
                if is_at_or_under(note.path, prefix):
                    deliver(callback, note)

    def clear(self) -> None:
        self._watches.clear()


# --- The in-memory backend -----------------------------------------------------------------
