"""The managed ledger's writer over local segments, next to the engine's partition API.

Standalone will write through ``SegmentWriter`` + ``LocalSegments`` (a segment = a ledger
of the engine, each entry a record with its entry id) instead of calling the engine's
partition API directly (issue 13). This measures what that costs, per entry size
(default 1 and 100 messages of 100 bytes per entry), in the same run on the same disk:

* **engine** — ``--writers`` asyncio tasks append to one partition of a fresh engine
  (``StorageEngine.append``), each awaiting its append before the next (group commit);
* **segments** — the same tasks append through one partition's ``SegmentWriter`` over
  ``LocalSegments`` on a fresh engine, SQLite metadata (the segment list), the writer
  rolling at the engine's default segment size, 128 MiB (``--segment-bytes`` makes both
  the writer and, in the engine phase, the engine roll sooner);
* **raw** — the physical limit: one thread, ``os.write`` + ``os.fsync`` per entry of the
  bytes the journal gets for it (``bench/storage.py``'s baseline).

All with ``fsync=always``. A phase stops after ``--messages`` or ``--budget-seconds``. The
phases alternate (engine, segments, engine, segments, ...) for ``--rounds`` rounds; the
table gives each round and the medians. Beside each rate, the event loop's CPU per entry
(``time.thread_time`` of the thread running the loop, over the timed appends: the writers,
the flusher and every completion, not the journal thread's write and fsync): what a path
costs in itself, which other processes sharing the cores disturb less than the rate.

Run: ``PYTHONPATH=. .venv/bin/python bench/segments.py [--messages N] [--budget-seconds S]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    RESULTS_DIR,
    fmt_ms,
    fmt_rate,
    machine_info,
    make_workdir,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from bench.storage import Plan, WriteResult, drive_writers, raw_baseline
from magnetar.core.clock import SYSTEM_CLOCK
from magnetar.core.config import Settings, build_settings
from magnetar.ledger.local_segments import LocalSegments
from magnetar.ledger.segment_storage import RolloverPolicy
from magnetar.ledger.writer import SegmentIds, SegmentWriter
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings
from magnetar.storage.ledger_store import LedgerStore

PARTITION = "public/default/bench"


@dataclass(frozen=True, slots=True)
class Phase:
    written: WriteResult
    per_fsync: float  # entries per journal fsync (group commit)
    loop_us: float  # CPU of the event loop's thread per entry, microseconds

    @classmethod
    def of(cls, written: WriteResult, engine: StorageEngine, loop_s: float) -> Phase:
        fsyncs = engine.stats.fsyncs
        per_fsync = engine.stats.entries / fsyncs if fsyncs else float("nan")
        return cls(written, per_fsync, loop_s / written.entries * 1e6)


async def _timed_drive(
    append: Callable[[bytes, int], Awaitable[None]], size: int, plan: Plan, writers: int
) -> tuple[WriteResult, float]:
    """``drive_writers``, and the CPU seconds the loop's thread spent meanwhile."""
    started = time.thread_time()
    written = await drive_writers(append, size, plan, writers)
    return written, time.thread_time() - started


@dataclass(frozen=True, slots=True)
class _Opened:
    settings: Settings
    meta: MetadataStore
    engine: StorageEngine


@contextlib.asynccontextmanager
async def _engine(data_dir: Path, segment_bytes: int) -> AsyncIterator[_Opened]:
    """A fresh engine in ``data_dir`` with fsync always, rolling at ``segment_bytes`` (0:
    its default); closed and removed afterwards."""
    overrides: dict[str, Any] = {"data_dir": data_dir, "fsync": "always"}
    if segment_bytes:
        overrides["segment_max_bytes"] = segment_bytes
    settings = build_settings(env={}, overrides=overrides)
    meta = open_metadata_store(settings.metadata)
    engine = await StorageEngine.open(StorageSettings.of(settings), meta)
    try:
        yield _Opened(settings, meta, engine)
    finally:
        await engine.aclose()
        await meta.aclose()
        shutil.rmtree(data_dir)


async def engine_phase(
    data_dir: Path, size: int, plan: Plan, writers: int, segment_bytes: int = 0
) -> Phase:
    """The engine rolls the partition at ``segment_bytes`` (0: its default)."""
    async with _engine(data_dir, segment_bytes) as opened:
        engine = opened.engine
        await engine.create_partition(PARTITION)

        async def append(payload: bytes, count: int) -> None:
            await engine.append(PARTITION, payload, count=count)

        written, loop_s = await _timed_drive(append, size, plan, writers)
        return Phase.of(written, engine, loop_s)


async def segments_phase(
    data_dir: Path, size: int, plan: Plan, writers: int, segment_bytes: int = 0
) -> Phase:
    """The writer rolls at ``segment_bytes`` (0: the engine's default segment size)."""
    async with _engine(data_dir, segment_bytes) as opened:
        store = await LedgerStore.open(opened.engine, data_dir / "fenced.json")
        policy = RolloverPolicy(opened.settings.segment_max_bytes)
        meta = opened.meta
        writer = await SegmentWriter.open(
            PARTITION, LocalSegments(store), meta, SegmentIds(meta), policy, SYSTEM_CLOCK
        )

        async def append(payload: bytes, count: int) -> None:
            await writer.append(payload, count=count)

        # the first append opens the segment while the other writers queue behind it: in
        # the timed phase they would start out of step, and appends that come back out of
        # step never share an fsync again (the engine phase's writers start together)
        await append(b"warm-up", 1)
        written, loop_s = await _timed_drive(append, size, plan, writers)
        await writer.close_open()
        return Phase.of(written, opened.engine, loop_s)


@dataclass(frozen=True, slots=True)
class Round:
    size: int
    engine_phase: Phase
    segments_phase: Phase

    @property
    def engine(self) -> WriteResult:
        return self.engine_phase.written

    @property
    def segments(self) -> WriteResult:
        return self.segments_phase.written

    @property
    def ratio(self) -> float:
        return self.segments.msgs_per_s / self.engine.msgs_per_s


HEADERS = (
    "msgs/entry", "round", "engine msgs/s", "p50 ms", "p99 ms", "entries/fsync", "loop µs/entry",
    "segments msgs/s", "p50 ms", "p99 ms", "entries/fsync", "loop µs/entry", "segments/engine",
    "raw msgs/s",
)  # fmt: skip


def rows(rounds: Sequence[Round], raws: dict[int, WriteResult]) -> list[list[str]]:
    out = []
    for size in sorted({r.size for r in rounds}):
        mine = [r for r in rounds if r.size == size]
        for i, r in enumerate(mine, 1):
            out.append(_row(str(i), r, raws[size]))
        if len(mine) > 1:
            e = statistics.median(r.engine.msgs_per_s for r in mine)
            s = statistics.median(r.segments.msgs_per_s for r in mine)
            e_us = statistics.median(r.engine_phase.loop_us for r in mine)
            s_us = statistics.median(r.segments_phase.loop_us for r in mine)
            raw = fmt_rate(raws[size].msgs_per_s)
            ratio = f"{s / e:.2f}x"
            engine = [fmt_rate(e), "", "", "", f"{e_us:.1f}"]
            segments = [fmt_rate(s), "", "", "", f"{s_us:.1f}"]
            out.append([str(size), "median", *engine, *segments, ratio, raw])
    return out


def _row(label: str, r: Round, raw: WriteResult) -> list[str]:
    e, s = r.engine, r.segments
    return [
        str(r.size),
        label,
        fmt_rate(e.msgs_per_s),
        fmt_ms(e.p50),
        fmt_ms(e.p99),
        f"{r.engine_phase.per_fsync:.2f}",
        f"{r.engine_phase.loop_us:.1f}",
        fmt_rate(s.msgs_per_s),
        fmt_ms(s.p50),
        fmt_ms(s.p99),
        f"{r.segments_phase.per_fsync:.2f}",
        f"{r.segments_phase.loop_us:.1f}",
        f"{r.ratio:.2f}x",
        fmt_rate(raw.msgs_per_s),
    ]


async def run_all(args: argparse.Namespace, workdir: Path) -> tuple[list[Round], dict[int, Any]]:
    rounds, raws = [], {}
    for size in args.sizes:
        plan = Plan(math.ceil(args.messages / size), args.budget_seconds)
        raws[size] = raw_baseline(workdir, size, plan)
        for i in range(args.rounds):
            e = await engine_phase(
                workdir / f"engine-{size}-{i}", size, plan, args.writers, args.segment_bytes
            )
            s = await segments_phase(
                workdir / f"segments-{size}-{i}", size, plan, args.writers, args.segment_bytes
            )
            r = Round(size, e, s)
            rounds.append(r)
            print(
                f"{size:>5} msgs/entry, round {i + 1}: engine {r.engine.msgs_per_s:,.0f} "
                f"msgs/s, segments {r.segments.msgs_per_s:,.0f} msgs/s ({r.ratio:.2f}x), "
                f"raw {raws[size].msgs_per_s:,.0f} msgs/s",
                flush=True,
            )
    return rounds, raws


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=200_000, help="messages per phase")
    p.add_argument("--budget-seconds", type=float, default=5.0, help="time budget per phase")
    p.add_argument("--sizes", default="1,100", help="messages per entry, comma-separated")
    p.add_argument("--writers", type=int, default=4, help="concurrent writer tasks")
    p.add_argument("--rounds", type=int, default=3, help="engine/segments pairs per size")
    p.add_argument(
        "--segment-bytes", type=int, default=0, help="segment size, both phases (0: default)"
    )
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "segments.json")
    p.add_argument("--dir", type=Path, help="where to write (default: the temp dir if on disk)")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.messages < 1 or args.writers < 1 or args.rounds < 1 or min(args.sizes) < 1:
        p.error("--messages, --writers, --rounds and every size must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, fs = make_workdir(args.dir)
    started = utc_now()
    print(f"{started}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})", flush=True)
    try:
        rounds, raws = asyncio.run(run_all(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    render = render_markdown_table if args.markdown else render_table
    rolls = f"rolling every {args.segment_bytes:,} bytes" if args.segment_bytes else "default"
    print(f"\nAppends, fsync=always, {args.writers} writer tasks, one partition ({rolls}):")
    print(render(HEADERS, rows(rounds, raws)))
    write_json(
        args.json,
        {
            "benchmark": "segments",
            "started": started,
            "command": " ".join(["bench/segments.py", *sys.argv[1:]]),
            "machine": machine_info(),
            "rounds": [
                {
                    "messages_per_entry": r.size,
                    "engine": r.engine.to_json(),
                    "engine_entries_per_fsync": r.engine_phase.per_fsync,
                    "engine_loop_us_per_entry": r.engine_phase.loop_us,
                    "segments": r.segments.to_json(),
                    "segments_entries_per_fsync": r.segments_phase.per_fsync,
                    "segments_loop_us_per_entry": r.segments_phase.loop_us,
                    "ratio": r.ratio,
                }
                for r in rounds
            ],
            "raw": {str(k): v.to_json() for k, v in raws.items()},
            "segment_bytes": args.segment_bytes,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
