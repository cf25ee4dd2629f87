"""Progress of long work in the CLI: a view's backfill, an offload.

On a terminal, one bar redrawn in place (done / total, percent, rate, ETA, state); elsewhere
(a pipe, a log file) a plain line per change, at most one a second. Progress goes to stderr,
so what the command prints on stdout (its result, or JSON with ``--json``) is as without it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from magnetar.cli.rest import AdminCallError, RestClient

POLL_S = 0.5


class ProgressBar:
    """Draws ``done`` of ``total`` ``unit`` with the rate since the start and an ETA."""

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        width: int = 28,
    ) -> None:
        self.label, self.unit = label, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.width = width
        self._first: tuple[float, float] | None = None  # (time, done) of the first update
        self._last_line = ""
        self._last_shown = -1e9

    def update(self, done: float, total: float, state: str = "") -> None:
        now = self.clock()
        if self._first is None:
            self._first = (now, done)
        # a terminal is redrawn up to 10 times a second, a log gets a line a second at most
        if now - self._last_shown < (0.1 if self.tty else 1.0) and done < total:
            return
        line = self._line(done, total, state, now)
        if self.tty:
            self.stream.write(f"\r{line}\x1b[K")
        elif line != self._last_line:
            self.stream.write(line + "\n")
        else:
            return
        self.stream.flush()
        self._last_shown, self._last_line = now, line

    def finish(self, message: str) -> None:
        """The last word: ends the bar's line on a terminal; printed as a line elsewhere."""
        if self.tty:
            self.stream.write(f"\r{self._last_line}\x1b[K\n" if self._last_line else "")
        self.stream.write(f"{self.label}: {message}\n")
        self.stream.flush()

    def _line(self, done: float, total: float, state: str, now: float) -> str:
        share = min(1.0, done / total) if total > 0 else 1.0
        assert self._first is not None
        started, first_done = self._first
        elapsed = now - started
        rate = (done - first_done) / elapsed if elapsed > 0 else 0.0
        eta = _duration((total - done) / rate) if rate > 0 and done < total else "--"
        counts = f"{_count(done)}/{_count(total)} {self.unit}"
        tail = f"{share:6.1%}  {_count(rate)} {self.unit}/s  ETA {eta}" + (
            f"  {state}" if state else ""
        )
        if not self.tty:
            return f"{self.label}: {counts} {tail.strip()}"
        filled = int(share * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"{self.label} [{bar}] {counts} {tail}"


def _count(n: float) -> str:
    """``950``, ``9,500``, ``95.0k``, ``9.5M``: short enough for one line."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if abs(n) >= size:
            return f"{n / (size if suffix != 'k' else 1e3):.1f}{suffix}"
    return f"{n:,.0f}"


def _duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def watch_view(
    rest: RestClient,
    name: str,
    *,
    bar: ProgressBar | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll ``GET /views/NAME`` until the view (or the new version it builds) is LIVE;
    returns its last status. AdminCallError when it fails or stops first."""
    bar = bar or ProgressBar(name, "events")
    while True:
        status = rest.call("GET", f"/views/{name}")
        version = status.get("pending") or status
        events = version.get("events") or {}
        total = float(events.get("total", 0))
        done = float(events.get("applied", version.get("progress", 0.0) * total))
        state = str(version.get("state", ""))
        unparsed = int(version.get("unparsed") or 0)
        bar.update(done, total, f"{state}, {unparsed} unparsed" if unparsed else state)
        if state == "LIVE" and not status.get("pending"):
            bar.finish(f"LIVE (version {status.get('version')})")
            return dict(status)
        if state in ("FAILED", "STOPPED"):
            bar.finish(state)
            raise AdminCallError(f"view {name} is {state}: {version.get('error') or 'stopped'}")
        sleep(POLL_S)


def watch_offload(
    rest: RestClient,
    path: str,
    *,
    bar: ProgressBar | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll ``GET {path}/offload`` after an offload request until nothing it asked for is
    left; returns the last status. AdminCallError when the offload fails."""
    bar = bar or ProgressBar(path.rsplit("/", 1)[-1], "bytes")
    first = rest.call("GET", f"{path}/offload")
    start = int(first.get("bytesOffloaded", 0))
    total = start + int(first.get("bytesQueued", 0))
    status = first
    while True:
        done = int(status.get("bytesOffloaded", 0))
        total = max(total, done + int(status.get("bytesQueued", 0)))
        bar.update(done - start, total - start, status["status"])
        if status["status"] == "ERROR":
            bar.finish("ERROR")
            raise AdminCallError(f"offload failed: {status.get('lastError')}")
        if status["status"] != "RUNNING" and not status.get("bytesQueued"):
            bar.finish(f"{status['status']} ({status.get('segmentsOffloaded', 0)} segments)")
            return dict(status)
        sleep(POLL_S)
        status = rest.call("GET", f"{path}/offload")
