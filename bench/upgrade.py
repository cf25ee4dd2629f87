"""The data-directory upgrade (``magnetar.ledger.upgrade``) next to what bounds it.

The upgrade reads every local entry of the engine's old partitions and appends it again as
a record of its ledger (``L<segment id>``), then checkpoints and writes each segment list.
In the same run, on the same disk, ``--rounds`` times over fresh data:

* **write** — filling the old layout: the same entries appended to the engine's partitions
  in batches of the upgrade's size (what the copy's write half costs, group commit alike);
* **upgrade** — :func:`upgrade` over that directory, reopened (cold tail caches);
* **cp** — the physical limit of a copy: the old partitions' segment files read and written
  to another directory of the same disk with ``shutil.copyfile``, then fsynced.

All with ``fsync=always`` and the engine's default segment size unless ``--segment-bytes``.

Run: ``PYTHONPATH=. .venv/bin/python bench/upgrade.py [--entries N] [--payload BYTES]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    RESULTS_DIR,
    fmt_rate,
    machine_info,
    make_workdir,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.core.config import build_settings
from magnetar.ledger.upgrade import COPY_BATCH, upgrade
from magnetar.meta import open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings
from magnetar.storage.ledger_store import LedgerStore

HEADERS = [
    "round",
    "write MB/s",
    "upgrade entries/s",
    "upgrade MB/s",
    "cp MB/s",
    "upgrade/write",
    "upgrade/cp",
]


@dataclass(frozen=True, slots=True)
class Round:
    entries: int
    data_bytes: int  # payload bytes
    file_bytes: int  # the old segment files
    write_s: float
    upgrade_s: float
    cp_s: float

    @property
    def write_mb_s(self) -> float:
        return self.data_bytes / self.write_s / 1e6

    @property
    def upgrade_mb_s(self) -> float:
        return self.data_bytes / self.upgrade_s / 1e6

    @property
    def cp_mb_s(self) -> float:
        return self.file_bytes / self.cp_s / 1e6


def _settings(data_dir: Path, segment_bytes: int) -> StorageSettings:
    overrides: dict[str, object] = {"data_dir": data_dir, "fsync": "always"}
    if segment_bytes:
        overrides["segment_max_bytes"] = segment_bytes
    return StorageSettings.of(build_settings(env={}, overrides=overrides))


async def _write_old(data_dir: Path, args: argparse.Namespace) -> tuple[float, int]:
    """Fill ``--partitions`` old partitions; (seconds, bytes of their segment files)."""
    settings = _settings(data_dir, args.segment_bytes)
    meta = open_metadata_store(build_settings(env={}, overrides={"data_dir": data_dir}).metadata)
    async with await StorageEngine.open(settings, meta) as engine:
        names = [f"public/default/old-{p}" for p in range(args.partitions)]
        payload = os.urandom(args.payload)
        started = time.perf_counter()
        for name in names:
            await engine.create_partition(name)
            left = args.entries // args.partitions
            while left:
                n = min(left, COPY_BATCH)
                await asyncio.gather(*(engine.append(name, payload) for _ in range(n)))
                left -= n
        await engine.checkpoint()
        seconds = time.perf_counter() - started
        files = sum(i.size for name in names for i in engine.segments(name))
    await meta.aclose()
    return seconds, files


async def _upgrade(data_dir: Path, segment_bytes: int) -> float:
    settings = _settings(data_dir, segment_bytes)
    meta = open_metadata_store(build_settings(env={}, overrides={"data_dir": data_dir}).metadata)
    async with await StorageEngine.open(settings, meta) as engine:
        store = await LedgerStore.open(engine, data_dir / "fenced.json")
        started = time.perf_counter()
        await upgrade(engine, store, meta)
        seconds = time.perf_counter() - started
    await meta.aclose()
    return seconds


def _copy_files(source: Path, target: Path) -> float:
    """Copy every file under ``source`` to ``target`` and fsync them: seconds taken."""
    started = time.perf_counter()
    for path in sorted(source.rglob("*.log")):
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        fd = os.open(dest, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - started


async def one_round(workdir: Path, i: int, args: argparse.Namespace) -> Round:
    data_dir = workdir / f"round-{i}"
    write_s, file_bytes = await _write_old(data_dir, args)
    ledger_dir = _settings(data_dir, args.segment_bytes).ledger_path
    cp_s = _copy_files(ledger_dir, workdir / f"cp-{i}")
    upgrade_s = await _upgrade(data_dir, args.segment_bytes)
    entries = args.entries // args.partitions * args.partitions
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.rmtree(workdir / f"cp-{i}", ignore_errors=True)
    return Round(entries, entries * args.payload, file_bytes, write_s, upgrade_s, cp_s)


def _row(label: str, write: float, entries: float, up: float, cp: float) -> list[str]:
    return [
        label,
        f"{write:,.1f}",
        fmt_rate(entries),
        f"{up:,.1f}",
        f"{cp:,.1f}",
        f"{up / write:.2f}x",
        f"{up / cp:.2f}x",
    ]


def rows(rounds: Sequence[Round]) -> list[list[str]]:
    out = [
        _row(str(k), r.write_mb_s, r.entries / r.upgrade_s, r.upgrade_mb_s, r.cp_mb_s)
        for k, r in enumerate(rounds, 1)
    ]
    med = statistics.median
    out.append(
        _row(
            "median",
            med(r.write_mb_s for r in rounds),
            med(r.entries / r.upgrade_s for r in rounds),
            med(r.upgrade_mb_s for r in rounds),
            med(r.cp_mb_s for r in rounds),
        )
    )
    return out


async def run_all(args: argparse.Namespace, workdir: Path) -> list[Round]:
    rounds = []
    for i in range(args.rounds):
        r = await one_round(workdir, i, args)
        rounds.append(r)
        print(
            f"round {i + 1}: write {r.write_mb_s:,.1f} MB/s, upgrade {r.upgrade_mb_s:,.1f} MB/s "
            f"({r.entries / r.upgrade_s:,.0f} entries/s), cp {r.cp_mb_s:,.1f} MB/s",
            flush=True,
        )
    return rounds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--entries", type=int, default=100_000, help="entries in all partitions")
    p.add_argument("--payload", type=int, default=1000, help="bytes per entry")
    p.add_argument("--partitions", type=int, default=4, help="old partitions")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--segment-bytes", type=int, default=0, help="segment size of the engine (0: default)"
    )
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "upgrade.json")
    p.add_argument("--dir", type=Path, help="where to write (default: the temp dir if on disk)")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    if min(args.entries, args.payload, args.partitions, args.rounds) < 1:
        p.error("--entries, --payload, --partitions and --rounds must be >= 1")
    if args.entries < args.partitions:
        p.error("--entries must be at least --partitions")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, fs = make_workdir(args.dir)
    started = utc_now()
    print(f"{started}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})", flush=True)
    try:
        rounds = asyncio.run(run_all(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    render = render_markdown_table if args.markdown else render_table
    print(
        f"\nUpgrade of {rounds[0].entries:,} entries of {args.payload:,} bytes in "
        f"{args.partitions} partitions, fsync=always (MB/s of payload; cp: of segment files):"
    )
    print(render(HEADERS, rows(rounds)))
    write_json(
        args.json,
        {
            "benchmark": "upgrade",
            "started": started,
            "command": " ".join(["bench/upgrade.py", *sys.argv[1:]]),
            "machine": machine_info(),
            "rounds": [
                {
                    "entries": r.entries,
                    "data_bytes": r.data_bytes,
                    "file_bytes": r.file_bytes,
                    "write_s": r.write_s,
                    "upgrade_s": r.upgrade_s,
                    "cp_s": r.cp_s,
                }
                for r in rounds
            ],
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
