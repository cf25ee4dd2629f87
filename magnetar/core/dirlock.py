"""One process per data directory: an exclusive ``flock`` on ``DIR/magnetar.lock``.

Two servers on one directory would share the journal, the metadata and the view checkpoints
and corrupt each other quietly, so a node takes the lock before it opens anything and keeps
it until it exits. The kernel releases a ``flock`` when its holder dies (also on SIGKILL), so
a crashed node never leaves a stale lock behind; the pid written in the file only serves to
name the holder. The descriptor is not inherited by child processes (Spark's JVM), so a
child outliving a killed node does not keep the directory locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from magnetar.core.config import Settings, check_writable
from magnetar.core.errors import MagnetarError

LOCK_FILE = "magnetar.lock"


class DirectoryInUseError(MagnetarError):
    """Another live process holds the directory's lock; the message names its pid and the
    setting that gives this process a directory of its own. Nothing was opened or changed."""

    code = "dir.in_use"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


class DirectoryLock:
    """An exclusive lock on one directory; :meth:`acquire`, then :meth:`release` (or exit)."""

    def __init__(self, directory: Path, setting: str) -> None:
        self.directory = directory
        self.setting = setting  # e.g. "data_dir": named in the refusal with its flag and env
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DirectoryInUseError` at once (never waits);
        ConfigError naming the setting when the directory cannot be created or written."""
        check_writable(self.setting, self.directory)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DirectoryInUseError(self._refusal(holder)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (the file stays: removing it would race a starting process)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock

    def _refusal(self, holder: int | None) -> str:
        who = f"pid {holder}" if holder else "a process whose pid is not recorded yet"
        flag = "--" + self.setting.replace("_", "-")
        return (
            f"{self.setting.replace('_', ' ')} {self.directory.resolve()} is in use by another "
            f"Magnetar process ({who}; lock {self.path.resolve()}): stop it, or give this one "
            f"a directory of its own with {flag} (MAGNETAR_{self.setting.upper()})"
        )


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def node_directories(settings: Settings) -> list[tuple[str, Path]]:
    """The directories a node writes, by setting: the data directory, and the journal and
    segment directories (their own lock files even when they sit inside the data directory,
    so that a second node pointing only ``--journal-dir`` at them is refused too)."""
    return [
        ("data_dir", settings.data_dir),
        ("journal_dir", settings.journal_path),
        ("ledger_dir", settings.ledger_path),
    ]


def lock_directories(named: list[tuple[str, Path]]) -> list[DirectoryLock]:
    """Lock each distinct directory of ``(setting, path)`` in order; on a refusal, release
    the ones already taken and raise :class:`DirectoryInUseError`."""
    taken: list[DirectoryLock] = []
    seen: set[Path] = set()
    try:
        for setting, path in named:
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            lock = DirectoryLock(path, setting)
            lock.acquire()
            taken.append(lock)
    except BaseException:
        for lock in taken:
            lock.release()
        raise
    return taken
