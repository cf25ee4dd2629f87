"""What a new user meets in the first hour with the ``magnetar`` command (issue 18), each as
a real subprocess against a real standalone: a second server on a used data directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from magnetar.testing.server import REPO, StandaloneProcess, free_port

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def magnetar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV, **(env or {})},
    )


def _ports() -> list[str]:
    return [
        *("--pulsar-port", str(free_port()), "--http-port", str(free_port())),
        *("--kafka-port", str(free_port()), "--flight-port", str(free_port())),
    ]


def _one_line_failure(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr + run.stdout, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("magnetar: error: "), run
    return lines[0]


def test_a_second_server_on_a_used_directory_exits_naming_the_holder(
    standalone: StandaloneProcess, tmp_path: Path
) -> None:
    assert standalone.proc is not None
    pid = standalone.proc.pid
    started = time.monotonic()
    run = magnetar("standalone", "--data-dir", str(standalone.data_dir), *_ports())
    line = _one_line_failure(run)
    assert time.monotonic() - started < 30, "it exits at once, it does not wait for the lock"
    assert f"pid {pid}" in line and str(standalone.data_dir.resolve()) in line
    assert "--data-dir" in line and "MAGNETAR_DATA_DIR" in line
    # a separate data directory sharing only the journal directory is refused too
    journal = str(standalone.data_dir / "journal")
    run = magnetar("standalone", "--data-dir", str(tmp_path), "--journal-dir", journal, *_ports())
    line = _one_line_failure(run)
    assert f"pid {pid}" in line and "--journal-dir" in line
    assert not (tmp_path / "metadata.db").exists(), "the refused node opened nothing"
    assert standalone.proc.poll() is None, "the first server runs on"
