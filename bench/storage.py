"""Storage engine benchmark: group-commit appends against the physical write+fsync limit.

For each entry size (default 1, 10, 100 and 1000 messages of 100 bytes per entry):

* **engine** — ``--writers`` asyncio tasks in one process append to ONE shared partition
  of a fresh engine with ``fsync=always``; each writer awaits its append before the next,
  so appends that arrive while an fsync runs share the next one (group commit). A follower
  task reads every entry right after it is acknowledged: the *tail read*, which the tail
  cache serves from memory.
* **raw** — the physical limit: one thread, ``os.write`` + ``os.fsync`` per entry, of the
  bytes the journal gets for it (payload + 48 bytes of journal prefix and entry header),
  appended to one file in the same directory.
* **catch-up read** — the engine is closed and reopened (empty tail cache), the segment
  files are dropped from the page cache (``posix_fadvise(DONTNEED)``) and the partition is
  read sequentially from its first offset to its end; then read once more, page cache warm.

With ``--catch-up-pairs N`` it measures only the catch-up read, standalone's storage against
the engine's partition API beneath it (standalone's layout before issue 13): ``--messages``
one-message entries are written into each (fast, many writers: writes are not measured),
then N rounds read each cold, alternating which goes first, and the medians are compared.
Both read exactly the same number of entries, so a round's ratio is not skewed by a write
phase that stopped early on one side.

Each write phase stops after ``--messages`` messages or ``--budget-seconds``, whichever
comes first, and reports what it actually did. Throughput counts payload only: MB/s is
10^6 payload bytes per second, the same measure for the engine and for raw.

Run: ``PYTHONPATH=. .venv/bin/python bench/storage.py [--messages N] [--budget-seconds S]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    MB,
    RESULTS_DIR,
    Filesystem,
    filesystem_of,
    fmt_ms,
    fmt_rate,
    machine_info,
    percentile,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.core.config import build_settings
from magnetar.core.metrics import Histogram
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings
from magnetar.storage.fileio import write_all
from magnetar.storage.records import ENTRY_HEADER_SIZE, JOURNAL_PREFIX_SIZE

MESSAGE_BYTES = 100
RECORD_OVERHEAD = JOURNAL_PREFIX_SIZE + ENTRY_HEADER_SIZE  # 48 bytes per journal record
PARTITION = "bench"
DEFAULT_SIZES = (1, 10, 100, 1000)


@dataclass(frozen=True, slots=True)
class Plan:
    """A write phase stops after ``entries`` entries or ``budget`` seconds, whichever first."""

    entries: int
    budget: float


@dataclass(frozen=True, slots=True)
class WriteResult:
    size: int  # messages per entry
    entries: int
    seconds: float
    p50: float  # append latency, seconds
    p99: float
    stopped_by: str  # "messages" or "budget"

    @property
    def messages(self) -> int:
        return self.entries * self.size

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("nan")

    @property
    def mb_per_s(self) -> float:
        return self.msgs_per_s * MESSAGE_BYTES / MB

    def to_json(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in dataclasses.asdict(self).items() if k not in ("p50", "p99")},
            "messages": self.messages,
            "msgs_per_s": self.msgs_per_s,
            "mb_per_s": self.mb_per_s,
            "p50_ms": self.p50 * 1000,
            "p99_ms": self.p99 * 1000,
        }


def _plain(value: Any) -> Any:
    """An engine statistic as JSON holds it: a histogram as its Prometheus buckets."""
    if isinstance(value, Histogram):
        buckets, total = value.cumulative()
        return {"buckets": dict(buckets), "sum": total, "count": value.count}
    return value


@dataclass(slots=True)
class ReadResult:
    messages: int = 0
    reads: int = 0  # engine.read calls
    seconds: float = 0.0  # catch-up: wall time; tail: time spent inside engine.read
    cache_hits: int = 0  # tail reads only: reads the tail cache answered

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("nan")

    @property
    def mb_per_s(self) -> float:
        return self.msgs_per_s * MESSAGE_BYTES / MB

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "msgs_per_s": self.msgs_per_s,
            "mb_per_s": self.mb_per_s,
        }


@dataclass(frozen=True, slots=True)
class SizeResult:
    size: int
    engine: WriteResult
    raw: WriteResult
    raw_grouped: WriteResult  # raw with as many entries per fsync as there are writers
    tail: ReadResult
    catchup_disk: ReadResult
    catchup_cached: ReadResult
    engine_stats: dict[str, int]

    @property
    def ratio(self) -> float:
        """Engine throughput over raw throughput (same payload per message)."""
        return self.engine.msgs_per_s / self.raw.msgs_per_s

    @property
    def grouped_ratio(self) -> float:
        """Engine throughput over raw throughput at the engine's group-commit batch size."""
        return self.engine.msgs_per_s / self.raw_grouped.msgs_per_s

    @property
    def entries_per_fsync(self) -> float:
        fsyncs = self.engine_stats["fsyncs"]
        return self.engine_stats["entries"] / fsyncs if fsyncs else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "messages_per_entry": self.size,
            "entry_payload_bytes": self.size * MESSAGE_BYTES,
            "engine": self.engine.to_json(),
            "raw": self.raw.to_json(),
            "ratio": self.ratio,
            "raw_grouped": self.raw_grouped.to_json(),
            "grouped_ratio": self.grouped_ratio,
            "entries_per_fsync": self.entries_per_fsync,
            "tail_read": self.tail.to_json(),
            "catchup_read_disk": self.catchup_disk.to_json(),
            "catchup_read_page_cache": self.catchup_cached.to_json(),
            "engine_stats": self.engine_stats,
        }


def _write_result(
    size: int, plan: Plan, latencies: list[float], seconds: float, batch: int = 1
) -> WriteResult:
    entries = len(latencies) * batch
    stopped_by = "messages" if entries >= plan.entries else "budget"
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return WriteResult(size, entries, seconds, p50, p99, stopped_by)


# -- the physical limit ---------------------------------------------------------------------


def raw_baseline(directory: Path, size: int, plan: Plan, batch: int = 1) -> WriteResult:
    """One writer: write the journal's bytes for ``batch`` entries at once, fsync, repeat.

    ``batch=1`` is the limit the goals compare with. ``batch=writers`` writes what one group
    commit of the engine writes to its journal, the limit for the engine's own I/O pattern.
    """
    record = os.urandom(batch * (size * MESSAGE_BYTES + RECORD_OVERHEAD))
    path = directory / f"raw-{size}x{batch}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    latencies: list[float] = []
    try:
        start = now = time.perf_counter()
        deadline = start + plan.budget
        while len(latencies) * batch < plan.entries and now < deadline:
            write_all(fd, record)
            os.fsync(fd)
            done = time.perf_counter()
            latencies.append(done - now)
            now = done
    finally:
        os.close(fd)
        path.unlink()
    return _write_result(size, plan, latencies, now - start, batch)


# -- the engine -----------------------------------------------------------------------------


# standalone's storage (segments), or the storage engine's partition API beneath it (engine:
# standalone's layout before issue 13)
Storage = StorageEngine | LocalStorage


@contextlib.asynccontextmanager
async def opened_engine(data_dir: Path, kind: str = "engine") -> AsyncIterator[Storage]:
    """Standalone's storage on ``data_dir`` (``segments``: the managed ledger's writer over
    the engine's ledgers), or the engine's partition API alone (``engine``)."""
    settings = build_settings(env={}, overrides={"data_dir": data_dir, "fsync": "always"})
    meta = open_metadata_store(settings.metadata)
    try:
        storage: Storage
        if kind == "segments":
            storage = await LocalStorage.open(settings, meta)
        else:
            storage = await StorageEngine.open(StorageSettings.of(settings), meta)
        try:
            yield storage
        finally:
            await storage.aclose()
    finally:
        await meta.aclose()


async def run_writers(
    engine: Storage, size: int, plan: Plan, writers: int, appended: asyncio.Event
) -> WriteResult:
    """``writers`` tasks append to the one partition until the plan says stop."""

    async def append(payload: bytes, count: int) -> None:
        await engine.append(PARTITION, payload, count=count)
        appended.set()

    return await drive_writers(append, size, plan, writers)


async def drive_writers(
    append: Callable[[bytes, int], Awaitable[object]], size: int, plan: Plan, writers: int
) -> WriteResult:
    """``writers`` tasks call ``append(payload, size)`` until the plan says stop."""
    payload = os.urandom(size * MESSAGE_BYTES)
    latencies: list[float] = []
    issued = 0
    start = time.perf_counter()
    deadline = start + plan.budget

    async def writer() -> None:
        nonlocal issued
        while issued < plan.entries and time.perf_counter() < deadline:
            issued += 1
            t0 = time.perf_counter()
            await append(payload, size)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(writer() for _ in range(writers)))
    return _write_result(size, plan, latencies, time.perf_counter() - start)


async def follow_tail(
    engine: Storage,
    appended: asyncio.Event,
    finished: asyncio.Event,
    args: argparse.Namespace,
) -> ReadResult:
    """Read each entry as soon as it is acknowledged, until the writers have finished."""
    # reads served from memory (the engine's tail cache, or the writer's tail of a partition)
    hits_before = engine.stats.cache_hits
    result = ReadResult()
    offset = engine.start_offset(PARTITION)
    while True:
        if offset >= engine.end_offset(PARTITION):
            if finished.is_set():
                break
            appended.clear()  # no await since the check: a new ack cannot slip past
            await appended.wait()
            continue
        t0 = time.perf_counter()
        entries = await engine.read(
            PARTITION, offset, max_entries=args.read_max_entries, max_bytes=args.read_max_bytes
        )
        result.seconds += time.perf_counter() - t0
        result.reads += 1
        result.messages += entries[-1].next_offset - offset
        offset = entries[-1].next_offset
    result.cache_hits = engine.stats.cache_hits - hits_before
    return result


async def write_and_follow(
    engine: Storage, size: int, plan: Plan, args: argparse.Namespace
) -> tuple[WriteResult, ReadResult]:
    appended, finished = asyncio.Event(), asyncio.Event()
    follower = asyncio.create_task(follow_tail(engine, appended, finished, args))
    try:
        written = await run_writers(engine, size, plan, args.writers, appended)
    finally:
        finished.set()  # the follower drains what was acknowledged, then returns
        appended.set()
        tail = await follower
    return written, tail


async def read_all(engine: Storage, args: argparse.Namespace) -> ReadResult:
    """Read the partition sequentially from its first offset to its end."""
    result = ReadResult()
    offset, end = engine.start_offset(PARTITION), engine.end_offset(PARTITION)
    first = offset
    start = time.perf_counter()
    while offset < end:
        entries = await engine.read(
            PARTITION, offset, max_entries=args.read_max_entries, max_bytes=args.read_max_bytes
        )
        result.reads += 1
        offset = entries[-1].next_offset
    result.seconds = time.perf_counter() - start
    result.messages = offset - first
    return result


def evict_page_cache(directory: Path) -> None:
    """Drop the (clean, fsynced) pages of every file under ``directory`` from the page cache."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


async def bench_size(workdir: Path, size: int, args: argparse.Namespace) -> SizeResult:
    plan = Plan(math.ceil(args.messages / size), args.budget_seconds)
    raw = raw_baseline(workdir, size, plan)
    raw_grouped = raw_baseline(workdir, size, plan, batch=args.writers)
    data_dir = workdir / f"engine-{size}"
    async with opened_engine(data_dir, args.ledger_storage) as engine:
        await engine.create_partition(PARTITION)
        written, tail = await write_and_follow(engine, size, plan, args)
        stats = {k: _plain(v) for k, v in dataclasses.asdict(engine.stats).items()}
    async with opened_engine(data_dir, args.ledger_storage) as engine:  # cold tail and cache
        await engine.create_partition(PARTITION)
        evict_page_cache(engine.ledger_dir)
        disk = await read_all(engine, args)
        cached = await read_all(engine, args)
    shutil.rmtree(data_dir)
    return SizeResult(size, written, raw, raw_grouped, tail, disk, cached, stats)


async def fill(data_dir: Path, kind: str, entries: int) -> None:
    """``entries`` one-message entries in ``kind``'s storage, 64 writers (not timed)."""
    async with opened_engine(data_dir, kind) as engine:
        await engine.create_partition(PARTITION)
        plan = Plan(entries, budget=math.inf)
        await run_writers(engine, 1, plan, 64, asyncio.Event())


async def cold_catch_up(
    data_dir: Path, kind: str, args: argparse.Namespace
) -> tuple[ReadResult, float]:
    """The catch-up from disk, and the seconds the storage took to open (page cache cold
    for both: the ledger store rebuilds its index from the records at open)."""
    evict_page_cache(data_dir)
    start = time.perf_counter()
    async with opened_engine(data_dir, kind) as engine:
        opened = time.perf_counter() - start
        await engine.create_partition(PARTITION)
        evict_page_cache(engine.ledger_dir)
        return await read_all(engine, args), opened


async def catch_up_pairs(
    workdir: Path, args: argparse.Namespace
) -> dict[str, dict[str, list[float]]]:
    """Cold catch-up msgs/s and open seconds of each layout, round by round (see the
    module's docstring)."""
    kinds = ("segments", "engine")
    for kind in kinds:
        await fill(workdir / kind, kind, args.messages)
    got: dict[str, dict[str, list[float]]] = {k: {"msgs_per_s": [], "open_s": []} for k in kinds}
    for n in range(args.catch_up_pairs):
        for kind in kinds if n % 2 == 0 else kinds[::-1]:
            read, opened = await cold_catch_up(workdir / kind, kind, args)
            assert read.messages == args.messages, f"{kind} read {read.messages} messages"
            got[kind]["msgs_per_s"].append(read.msgs_per_s)
            got[kind]["open_s"].append(opened)
        seg, eng = (got[k]["msgs_per_s"][-1] for k in kinds)
        seg_open, eng_open = (got[k]["open_s"][-1] for k in kinds)
        print(
            f"round {n + 1}: segments {seg:,.0f} msgs/s, engine {eng:,.0f}, {seg / eng:.2f}x; "
            f"open {seg_open:.2f} s / {eng_open:.2f} s",
            flush=True,
        )
    return got


def print_pairs(got: dict[str, dict[str, list[float]]], markdown: bool) -> None:
    seg, eng = got["segments"]["msgs_per_s"], got["engine"]["msgs_per_s"]
    ratios = sorted(s / e for s, e in zip(seg, eng, strict=True))
    row = [
        str(len(seg)),
        fmt_rate(statistics.median(seg)),
        fmt_rate(statistics.median(eng)),
        f"{statistics.median(seg) / statistics.median(eng):.2f}x",
        f"{ratios[0]:.2f}-{ratios[-1]:.2f}x",
        f"{statistics.median(got['segments']['open_s']):.2f}",
        f"{statistics.median(got['engine']['open_s']):.2f}",
    ]
    headers = (
        "rounds", "segments msgs/s", "engine msgs/s", "ratio of medians", "rounds' ratios",
        "segments open s", "engine open s",
    )  # fmt: skip
    render = render_markdown_table if markdown else render_table
    print("\nCold catch-up, one-message entries, equal counts (medians):")
    print(render(headers, [row]))


# -- report ---------------------------------------------------------------------------------

WRITE_HEADERS = (
    "msgs/entry", "msgs done", "msgs/s", "MB/s", "p50 ms", "p99 ms",
    "raw done", "raw msgs/s", "raw MB/s", "ratio",
)  # fmt: skip
GROUP_HEADERS = (
    "msgs/entry", "entries/fsync", "raw×W msgs/s", "raw×W MB/s", "raw×W p50 ms", "vs raw×W",
)  # fmt: skip
READ_HEADERS = (
    "msgs/entry", "catch-up MB/s (disk)", "catch-up msgs/s (disk)",
    "catch-up MB/s (page cache)", "tail MB/s", "tail reads from cache",
)  # fmt: skip


def write_rows(results: Sequence[SizeResult]) -> list[list[str]]:
    return [
        [
            str(r.size),
            f"{r.engine.messages:,}",
            fmt_rate(r.engine.msgs_per_s),
            fmt_rate(r.engine.mb_per_s),
            fmt_ms(r.engine.p50),
            fmt_ms(r.engine.p99),
            f"{r.raw.messages:,}",
            fmt_rate(r.raw.msgs_per_s),
            fmt_rate(r.raw.mb_per_s),
            f"{r.ratio:.2f}x",
        ]
        for r in results
    ]


def group_rows(results: Sequence[SizeResult]) -> list[list[str]]:
    return [
        [
            str(r.size),
            f"{r.entries_per_fsync:.2f}",
            fmt_rate(r.raw_grouped.msgs_per_s),
            fmt_rate(r.raw_grouped.mb_per_s),
            fmt_ms(r.raw_grouped.p50),
            f"{r.grouped_ratio:.2f}x",
        ]
        for r in results
    ]


def read_rows(results: Sequence[SizeResult]) -> list[list[str]]:
    return [
        [
            str(r.size),
            fmt_rate(r.catchup_disk.mb_per_s),
            fmt_rate(r.catchup_disk.msgs_per_s),
            fmt_rate(r.catchup_cached.mb_per_s),
            fmt_rate(r.tail.mb_per_s),
            f"{r.tail.cache_hits:,}/{r.tail.reads:,}",
        ]
        for r in results
    ]


def goal_verdicts(results: Sequence[SizeResult], writers: int) -> list[dict[str, Any]]:
    goals = []
    large = [r for r in results if r.size >= 100]
    if large:
        goals.append(
            {
                "goal": ">= 0.8x raw at >= 100 messages per entry",
                "met": all(r.ratio >= 0.8 for r in large),
                "ratios": {str(r.size): r.ratio for r in large},
            }
        )
    single = [r for r in results if r.size == 1]
    if single:
        goals.append(
            {
                "goal": f"above raw at 1 message per entry with {writers} writers (group commit)",
                "met": single[0].ratio > 1.0,
                "ratios": {"1": single[0].ratio},
            }
        )
    return goals


def print_report(
    results: Sequence[SizeResult], goals: Sequence[dict[str, Any]], writers: int, md: bool
) -> None:
    render = render_markdown_table if md else render_table
    print("\nWrites (fsync=always, payload MB/s; ratio = engine msgs/s / raw msgs/s):")
    print(render(WRITE_HEADERS, write_rows(results)))
    print(f"\nGroup commit (raw×W: raw with W={writers} entries per write+fsync):")
    print(render(GROUP_HEADERS, group_rows(results)))
    print("\nReads (catch-up: fresh engine, sequential from offset 0; tail: follower):")
    print(render(READ_HEADERS, read_rows(results)))
    print()
    for goal in goals:
        ratios = ", ".join(f"{k} msgs/entry {v:.2f}x" for k, v in goal["ratios"].items())
        print(f"goal {'MET' if goal['met'] else 'NOT MET'}: {goal['goal']} ({ratios})")


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages per entry size")
    p.add_argument("--budget-seconds", type=float, default=20.0, help="time budget per phase")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="msgs per entry")
    p.add_argument("--writers", type=int, default=4, help="concurrent writer tasks")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "storage.json")
    p.add_argument("--dir", type=Path, help="where to write (default: the temp dir if on disk)")
    p.add_argument("--read-max-bytes", type=int, default=16 << 20)
    p.add_argument("--read-max-entries", type=int, default=100_000)
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument(
        "--ledger-storage",
        choices=("engine", "segments"),
        default="segments",
        help="what to measure: standalone's storage, the managed ledger's writer over the "
        "engine's ledgers (segments), or the engine's partition API alone (engine: "
        "standalone's layout before issue 13, the layer beneath today)",
    )
    p.add_argument(
        "--catch-up-pairs",
        type=int,
        default=0,
        metavar="N",
        help="only compare the cold catch-up of segments and engine over N alternating rounds",
    )
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.messages < 1 or args.writers < 1 or min(args.sizes, default=0) < 1:
        p.error("--messages, --writers and every size must be >= 1")
    return args


def make_workdir(requested: Path | None) -> tuple[Path, Filesystem]:
    """A fresh directory on a real disk: fsync on tmpfs would measure nothing."""
    parent = requested or Path(tempfile.gettempdir())
    if filesystem_of(parent).in_memory:
        if requested is not None:
            raise SystemExit(f"{requested} is in memory (tmpfs); pass --dir on a real disk")
        parent = RESULTS_DIR  # the temp dir is tmpfs: use the (gitignored) results dir
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-bench-", dir=parent))
    return workdir, filesystem_of(workdir)


async def run_all(args: argparse.Namespace, workdir: Path) -> list[SizeResult]:
    results = []
    for size in args.sizes:
        r = await bench_size(workdir, size, args)
        print(
            f"{size:>5} msgs/entry: engine {r.engine.msgs_per_s:,.0f} msgs/s "
            f"({r.engine.messages:,} msgs, stopped by {r.engine.stopped_by}), "
            f"raw {r.raw.msgs_per_s:,.0f} msgs/s, ratio {r.ratio:.2f}x",
            flush=True,
        )
        results.append(r)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, fs = make_workdir(args.dir)
    started = utc_now()
    print(f"{started}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})", flush=True)
    if args.catch_up_pairs:
        try:
            got = asyncio.run(catch_up_pairs(workdir, args))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print_pairs(got, args.markdown)
        write_json(
            args.json.with_name("storage_catch_up_pairs.json"),
            {
                "benchmark": "storage catch-up pairs",
                "started": started,
                "machine": machine_info(),
                "messages": args.messages,
                "results": got,
            },
        )
        return 0
    try:
        results = asyncio.run(run_all(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    goals = goal_verdicts(results, args.writers)
    print_report(results, goals, args.writers, args.markdown)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report = {
        "benchmark": "storage",
        "started": started,
        "command": " ".join(["bench/storage.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "filesystem": dataclasses.asdict(fs),
        "config": {
            **config,
            "message_bytes": MESSAGE_BYTES,
            "raw_record_bytes": f"payload + {RECORD_OVERHEAD} (journal prefix + entry header)",
            "fsync": "always",
            "layout": f"{args.writers} writer tasks, one shared partition",
        },
        "results": [r.to_json() for r in results],
        "goals": goals,
    }
    write_json(args.json, report)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
