"""The test harness's process control: pause() returns once the process is frozen, and
says at once when the process it should freeze has already exited."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from magnetar.testing.server import StandaloneProcess


def test_pause_returns_with_every_thread_stopped_and_resume_wakes_it(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path)
    server.proc = subprocess.Popen(["sleep", "30"], text=True)
    try:
        server.pause()
        assert _state(server.proc.pid) in ("T", "t")
        server.resume()
        assert server.proc.poll() is None  # woken, not ended
    finally:
        server.proc.kill()
        server.proc.wait()


@pytest.mark.parametrize("reaped", [False, True], ids=["zombie", "reaped"])
def test_pausing_a_process_that_exited_says_so(tmp_path: Path, reaped: bool) -> None:
    server = StandaloneProcess(tmp_path)
    server.proc = subprocess.Popen(["sh", "-c", "exit 3"], text=True)
    if reaped:
        server.proc.wait()
    else:  # exited, not yet waited for: its /proc entry is a zombie's
        while _state(server.proc.pid) != "Z":
            time.sleep(0.001)
    with pytest.raises(RuntimeError, match=r"exited \(code 3\) before it could be paused"):
        server.pause()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
