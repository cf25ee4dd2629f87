"""The data-directory lock in process and across processes: one holder at a time, the
refusal names the holder's pid and the setting, a dead holder leaves no stale lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.core.dirlock import (
    LOCK_FILE,
    DirectoryInUseError,
    DirectoryLock,
    lock_directories,
)
from magnetar.core.errors import ConfigError

HOLD = """
import sys, time
from pathlib import Path
from magnetar.core.dirlock import DirectoryLock
DirectoryLock(Path(sys.argv[1]), "data_dir").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_lock_is_refused_until_the_first_is_released(tmp_path: Path) -> None:
    first = DirectoryLock(tmp_path / "data", "data_dir")
    first.acquire()
    assert (tmp_path / "data" / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DirectoryInUseError) as refused:
        DirectoryLock(tmp_path / "data", "data_dir").acquire()
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message and "--data-dir" in message
    assert "MAGNETAR_DATA_DIR" in message and str((tmp_path / "data").resolve()) in message
    first.release()
    again = DirectoryLock(tmp_path / "data", "data_dir")
    again.acquire()
    again.release()


def test_another_process_is_named_and_its_death_frees_the_directory(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with pytest.raises(DirectoryInUseError, match=f"pid {holder.pid};"):
                DirectoryLock(tmp_path, "data_dir").acquire()
        finally:
            holder.kill()  # SIGKILL: no cleanup runs, the kernel drops the lock
    lock = DirectoryLock(tmp_path, "data_dir")
    lock.acquire()
    lock.release()


def test_lock_directories_takes_each_once_and_all_or_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    taken = lock_directories([("data_dir", data), ("journal_dir", data / "journal")])
    assert len(taken) == 2
    journal = tmp_path / "elsewhere"
    held = DirectoryLock(journal, "journal_dir")
    held.acquire()
    for lock in taken:
        lock.release()
    with pytest.raises(DirectoryInUseError, match="--journal-dir"):
        lock_directories([("data_dir", data), ("journal_dir", journal), ("ledger_dir", data)])
    # the data directory taken before the refusal was given back
    lock_directories([("data_dir", data)])[0].release()
    held.release()


def test_an_unusable_directory_names_its_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"journal_dir.*not writable"):
        DirectoryLock(blocker / "journal", "journal_dir").acquire()
