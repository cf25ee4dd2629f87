"""Small, careful file primitives: complete writes, durable replaces, directory fsync."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from magnetar.storage.errors import DiskFullError, WriteFailedError

# Linux accepts at most this many buffers per writev call.
IOV_MAX = 1024


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def writev_all(fd: int, buffers: Sequence[bytes]) -> None:
    """Write every buffer, in order, with as few system calls as possible."""
    for start in range(0, len(buffers), IOV_MAX):
        chunk = list(buffers[start : start + IOV_MAX])
        want = sum(len(b) for b in chunk)
        done = os.writev(fd, chunk)
        if done < want:  # a short write: finish the rest with plain writes
            write_all(fd, b"".join(chunk)[done:])


def write_file_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: temp file, fsync, rename, fsync the dir."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def as_storage_error(e: OSError, what: str) -> Exception:
    """Translate an OSError from the write path into the error the caller should see."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(f"{what}: the disk is full ({e.strerror}); free space and retry")
    return WriteFailedError(f"{what}: {e.strerror or e}")
