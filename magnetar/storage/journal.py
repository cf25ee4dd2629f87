"""The journal: append-only files that make an append durable before it is acknowledged.

Every entry is written here first, fsynced (group commit: one fsync covers every record
that arrived while the previous one ran), and only then copied into its segment file and
acknowledged. Segment files are fsynced lazily, at checkpoints; the journal covers them
until then. Files are numbered ``00000000000000000001.journal``, ``...2.journal``; once a
checkpoint has made every record of a file safe in segment files, the file is deleted.

Methods that touch files run on the engine's single writer thread, never the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from magnetar.core.entries import Entry
from magnetar.storage.errors import CorruptionError
from magnetar.storage.fileio import fsync_dir, writev_all
from magnetar.storage.records import (
    JOURNAL_PREFIX_SIZE,
    RecordError,
    claimed_range,
    decode_journal_record,
)

SUFFIX = ".journal"


def journal_file(directory: Path, number: int) -> Path:
    return directory / f"{number:020d}{SUFFIX}"


def list_journal_files(directory: Path) -> list[int]:
    numbers = []
    for path in directory.glob(f"*{SUFFIX}"):
        if path.stem.isdigit():
            numbers.append(int(path.stem))
    return sorted(numbers)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    number: int  # journal file
    position: int  # byte position of the record in that file
    partition_id: int
    entry: Entry


class Journal:
    """The current journal file and its rotation. Not thread-safe: one writer thread."""

    def __init__(self, directory: Path, number: int) -> None:
        self.directory = directory
        self.number = number
        self.path = journal_file(directory, number)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        fsync_dir(directory)

    def write(self, buffers: Sequence[bytes]) -> int:
        """Append ``buffers``; returns the position they start at. Not yet durable."""
        start = self.size
        try:
            writev_all(self.fd, buffers)
        except OSError:
            self.truncate(start)
            raise
        self.size = start + sum(len(b) for b in buffers)
        return start

    def truncate(self, size: int) -> None:
        """Cut a failed write back off, so a later record never follows garbage."""
        os.ftruncate(self.fd, size)
        self.size = size

    def sync(self) -> None:
        os.fsync(self.fd)

    def rotate(self) -> Journal:
        """Sync this file and open the next; this one is closed only once that worked."""
        self.sync()
        following = Journal(self.directory, self.number + 1)
        self.close()
        return following

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def remove_before(directory: Path, number: int) -> int:
    """Delete journal files numbered below ``number``; returns how many were removed."""
    removed = 0
    for n in list_journal_files(directory):
        if n < number:
            journal_file(directory, n).unlink(missing_ok=True)
            removed += 1
    if removed:
        fsync_dir(directory)
    return removed


@dataclass(frozen=True, slots=True)
class TornTail:
    """Bytes recovery cut off the end of a file: a write that never finished — or, after a
    power loss, damage to the last acknowledged record, which looks the same. Reported so an
    operator can tell (the offsets are what the damaged header claims, if readable)."""

    path: Path
    position: int
    bytes: int
    claimed: tuple[int, int] | None  # (base offset, count) from the unchecked header

    def describe(self) -> str:
        what = (
            f"offsets {self.claimed[0]}..{self.claimed[0] + self.claimed[1] - 1}"
            if self.claimed and self.claimed[1] > 0
            else "unreadable offsets"
        )
        return f"cut {self.bytes} bytes at {self.path}:{self.position} ({what})"


def replay(
    directory: Path,
    start_number: int,
    start_position: int,
    on_cut: Callable[[TornTail], None] | None = None,
) -> Iterator[JournalRecord]:
    """Every valid record from (``start_number``, ``start_position``) on, in order.

    A record that ends early or fails its checksum at the very end of the *last* file is a
    torn write that was never acknowledged: the file is cut there and ``on_cut`` told. The
    same damage anywhere else lies inside acknowledged data and raises CorruptionError.
    """
    numbers = [n for n in list_journal_files(directory) if n >= start_number]
    for i, number in enumerate(numbers):
        path = journal_file(directory, number)
        data = path.read_bytes()
        pos = start_position if number == start_number else 0
        while pos < len(data):
            try:
                pid, entry, after = decode_journal_record(data, pos)
            except RecordError as e:
                if i == len(numbers) - 1 and _nothing_valid_after(data, pos):
                    _cut(path, pos)
                    if on_cut is not None:
                        claimed = claimed_range(data, pos, JOURNAL_PREFIX_SIZE)
                        on_cut(TornTail(path, pos, len(data) - pos, claimed))
                    break
                raise CorruptionError(str(path), pos, str(e)) from None
            yield JournalRecord(number, pos, pid, entry)
            pos = after


def _nothing_valid_after(data: bytes, pos: int) -> bool:
    """True when no valid record starts anywhere after ``pos``: a torn tail, not damage."""
    for start in range(pos + 1, len(data) - 48 + 1):
        try:
            decode_journal_record(data, start)
        except RecordError:
            continue
        return False
    return True


def _cut(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
