"""The node's open segment files: at most ``max_open`` descriptors, least recently used closed.

A partition used to hold its open segment's descriptor (and one per segment it had read)
for its whole life: 2,000 idle topics held 2,000 descriptors, and past the process's limit
every new topic failed with EMFILE. Here every segment descriptor is borrowed from one
:class:`OpenFiles` (BookKeeper's ``openFileLimit``): a descriptor in use is pinned and never
closed under its user; idle ones beyond the cap are closed oldest first and reopened on
demand, at the cost of one ``open`` call.

Closing an idle write descriptor without fsyncing it loses nothing: fsync through any later
descriptor of the file flushes every dirty page of it, and Linux (4.16+) reports a write-back
error nobody has seen yet to the next opener as well.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from magnetar.storage.errors import TooManyOpenFilesError

log = logging.getLogger(__name__)

READ = os.O_RDONLY
APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND
_EXHAUSTED = (errno.EMFILE, errno.ENFILE)


@dataclass(slots=True)
class _Handle:
    fd: int
    users: int = 0
    doomed: bool = False  # forgotten while in use: closed by its last user


class OpenFiles:
    """A thread-safe LRU of open descriptors keyed by (path, flags)."""

    def __init__(self, max_open: int) -> None:
        self.max_open = max(1, max_open)
        self._handles: OrderedDict[tuple[Path, int], _Handle] = OrderedDict()
        self._lock = threading.Lock()
        self.opens = 0  # descriptors opened (a reopen after an eviction counts)
        self.evictions = 0

    @property
    def open_count(self) -> int:
        return len(self._handles)

    @contextlib.contextmanager
    def use(self, path: Path, flags: int) -> Iterator[int]:
        """A descriptor of ``path`` opened with ``flags``, pinned until the block ends.

        Raises FileNotFoundError (reads of a deleted file), TooManyOpenFilesError when the
        process is out of descriptors even after closing every idle one, or another OSError.
        """
        key = (path, flags)
        handle = self._pin(key)
        try:
            yield handle.fd
        finally:
            self._unpin(key, handle)

    def forget(self, path: Path) -> None:
        """Close the descriptors of ``path`` (its segment closed or was deleted); one in
        use is closed when its user is done with it."""
        with self._lock:
            for flags in (READ, APPEND):
                handle = self._handles.pop((path, flags), None)
                if handle is None:
                    continue
                if handle.users:
                    handle.doomed = True
                else:
                    os.close(handle.fd)

    def close_all(self) -> None:
        with self._lock:
            for handle in self._handles.values():
                if handle.users:
                    handle.doomed = True
                else:
                    os.close(handle.fd)
            self._handles.clear()

    def _pin(self, key: tuple[Path, int]) -> _Handle:
        with self._lock:
            handle = self._handles.get(key)
            if handle is None:
                handle = _Handle(self._open(*key))
                self._handles[key] = handle
                self.opens += 1
            else:
                self._handles.move_to_end(key)
            handle.users += 1
            self._shrink(self.max_open)
            return handle

    def _unpin(self, key: tuple[Path, int], handle: _Handle) -> None:
        with self._lock:
            handle.users -= 1
            if handle.users == 0 and handle.doomed:
                os.close(handle.fd)
            elif len(self._handles) > self.max_open:
                self._shrink(self.max_open)

    def _open(self, path: Path, flags: int) -> int:
        """Open, making room among idle descriptors if the process has run out."""
        try:
            return os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in _EXHAUSTED:
                raise
        freed = self._shrink(len(self._handles) // 2)
        try:
            return os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in _EXHAUSTED:
                raise
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            raise TooManyOpenFilesError(
                f"cannot open {path}: the process has no file descriptor left (limit {soft}, "
                f"{len(self._handles)} segment files open after closing {freed} idle ones; "
                "the rest are connections and other files). Raise the limit (ulimit -n, "
                "systemd LimitNOFILE=), or lower max_connections / max_open_segment_files"
            ) from e

    def _shrink(self, to: int) -> int:
        """Close least recently used idle descriptors until at most ``to`` remain (those in
        use stay). Called under the lock. Returns how many were closed."""
        closed = 0
        if len(self._handles) <= to:
            return 0
        for key in list(self._handles):
            handle = self._handles[key]
            if handle.users:
                continue
            del self._handles[key]
            os.close(handle.fd)
            closed += 1
            if len(self._handles) <= to:
                break
        self.evictions += closed
        return closed


def segment_file_cap(configured: int) -> int:
    """``configured``, but at most half the process's open-file limit: the other half is
    for connections, the journal and the metadata store."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or configured <= soft // 2:
        return configured
    log.warning(
        "max_open_segment_files %d is more than half the open-file limit %d: using %d",
        configured,
        soft,
        soft // 2,
    )
    return max(1, soft // 2)
