"""Shared pieces of the benchmarks: percentiles, plain-text tables, JSON results, machine facts.

Every benchmark prints a table for people and writes a JSON file for tools; both come from
here so they look alike. Units: MB is 10^6 bytes, times are wall-clock seconds.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 1_000_000
RESULTS_DIR = Path(__file__).resolve().parent / "results"  # gitignored
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def best_seconds(work: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``work``, in seconds."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        runs.append(time.perf_counter() - start)
    return min(runs)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(len(ordered) * q / 100))
    return ordered[rank - 1]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [row[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def render_markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The same table as Markdown (for docs/benchmarks.md)."""
    head = "| " + " | ".join(headers) + " |"
    align = "|" + "|".join([":---"] + ["---:"] * (len(headers) - 1)) + "|"
    body = ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join([head, align, *body])


def fmt_rate(value: float) -> str:
    """A throughput with thousands separators and sensible precision."""
    if value != value:  # NaN
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def fmt_ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:.2f}"


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


@dataclass(frozen=True, slots=True)
class Filesystem:
    device: str
    mount_point: str
    fstype: str

    @property
    def in_memory(self) -> bool:
        return self.fstype in MEMORY_FILESYSTEMS


def filesystem_of(path: Path) -> Filesystem:
    """The mount holding ``path`` (from /proc/mounts; "unknown" off Linux)."""
    target = str(path.resolve())
    best = Filesystem("unknown", "", "unknown")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        device, mount, fstype, *_ = line.split()
        mount = mount.replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best.mount_point):
            best = Filesystem(device, mount, fstype)
    return best


def machine_info() -> dict[str, Any]:
    """Facts that make a result comparable with another machine's."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def make_workdir(
    requested: Path | None, prefix: str = "magnetar-bench-"
) -> tuple[Path, Filesystem]:
    """A fresh directory on a real disk: fsync on tmpfs would measure nothing.

    Under ``requested`` if given (refused when it is in memory), else under the temp dir, or
    under the gitignored results dir when the temp dir is tmpfs. The caller removes it.
    """
    parent = requested or Path(tempfile.gettempdir())
    if filesystem_of(parent).in_memory:
        if requested is not None:
            raise SystemExit(f"{requested} is in memory (tmpfs); pass --dir on a real disk")
        parent = RESULTS_DIR
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    return workdir, filesystem_of(workdir)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process (all its threads) has used, from /proc; NaN off
    Linux or when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ")"
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")
