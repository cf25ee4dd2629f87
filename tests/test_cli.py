"""The ``magnetar`` command as a user runs it: a real subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def magnetar(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,  # type: ignore[call-overload]
    )


def test_standalone_starts_reports_its_data_and_stops_cleanly(tmp_path: Path) -> None:
    with magnetar("standalone", "--data-dir", str(tmp_path / "d"), "--pulsar-port", "0") as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "ready" in line and str(tmp_path / "d") in line
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    assert (tmp_path / "d" / "metadata.db").exists()
    assert (tmp_path / "d" / "journal").is_dir()


def test_bad_settings_fail_with_a_message_naming_them(tmp_path: Path) -> None:
    proc = magnetar("standalone", "--data-dir", str(tmp_path), "--fsync", "sometimes")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "fsync" in err and "always" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = magnetar("standalone", "--data-dir", str(tmp_path), "--journal-dir", str(blocker / "j"))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "journal_dir" in err and "not writable" in err


def test_help_on_every_level() -> None:
    for args in ([], ["standalone"]):
        proc = magnetar(*args, "--help")
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "usage: magnetar" in out
    proc = magnetar("nonsense")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "invalid choice" in err
