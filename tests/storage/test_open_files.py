"""The node's open segment files are bounded (issue 21, item 3): idle descriptors beyond the
cap are closed and reopened on demand, one in use is never closed under its user, and a
process out of descriptors gets an error saying so."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from magnetar.storage import TooManyOpenFilesError
from magnetar.storage.open_files import APPEND, READ, OpenFiles


def _files(tmp_path: Path, n: int) -> list[Path]:
    paths = [tmp_path / f"{i}.log" for i in range(n)]
    for p in paths:
        p.write_bytes(p.name.encode())
    return paths


def test_idle_descriptors_beyond_the_cap_are_closed_and_reopened(tmp_path: Path) -> None:
    files = OpenFiles(4)
    paths = _files(tmp_path, 10)
    for p in paths:
        with files.use(p, READ) as fd:
            assert os.pread(fd, 100, 0) == p.name.encode()
    assert files.open_count == 4
    with files.use(paths[0], READ) as fd:  # evicted long ago: opened again
        assert os.pread(fd, 100, 0) == b"0.log"
    assert files.opens == 11 and files.open_count == 4


def test_a_descriptor_in_use_is_never_closed(tmp_path: Path) -> None:
    files = OpenFiles(2)
    paths = _files(tmp_path, 6)
    with files.use(paths[0], APPEND) as held:
        for p in paths[1:]:
            with files.use(p, READ):
                pass
        os.write(held, b"+more")  # still the same, open file
        files.forget(paths[0])  # the segment closes meanwhile: closed when released
        os.fstat(held)
    assert paths[0].read_bytes() == b"0.log+more"
    with pytest.raises(OSError):
        os.fstat(held)


def test_out_of_descriptors_closes_idle_ones_then_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = OpenFiles(100)
    paths = _files(tmp_path, 8)
    for p in paths[:6]:
        with files.use(p, READ):
            pass
    real_open = os.open
    budget = [0]

    def emfile_unless_freed(path: object, flags: int, mode: int = 0o777) -> int:
        if budget[0] <= 0:
            raise OSError(errno.EMFILE, "Too many open files")
        budget[0] -= 1
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    real_close = os.close

    def close(fd: int) -> None:
        budget[0] += 1
        real_close(fd)

    monkeypatch.setattr(os, "open", emfile_unless_freed)
    monkeypatch.setattr(os, "close", close)
    with files.use(paths[6], READ) as fd:  # idle ones are closed to make room
        assert os.pread(fd, 100, 0) == b"6.log"
    assert files.open_count <= 4
    budget[0] = -1000  # now nothing can be opened whatever is closed
    with pytest.raises(TooManyOpenFilesError) as caught, files.use(paths[7], READ):
        pass
    message = str(caught.value)
    assert "no file descriptor left" in message and "ulimit -n" in message
    assert caught.value.retriable
