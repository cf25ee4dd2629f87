"""Metadata store benchmark: the embedded SQLite store and the ZooKeeper store, next to the
peer that bounds the latter — kazoo's own calls on the same ZooKeeper in the same run.

Three workloads, each ``--ops`` operations of ``--value-bytes`` values:

* **create** — a put of a new node per operation (topics, subscriptions, segments);
* **cas** — read, then put with the version read, of one node (a cursor or a segment list:
  the compare-and-set every owner's write is);
* **concurrent** — ``--writers`` coroutines creating nodes at once (many topics loading).

ZooKeeper is Debian's package on loopback, one server, its data on the same disk; SQLite
fsyncs its write-ahead log per commit. Latencies are per operation, as the caller sees them.

Run: ``PYTHONPATH=. .venv/bin/python bench/metadata.py [--ops N] [--writers N]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.common import (
    RESULTS_DIR,
    fmt_ms,
    fmt_rate,
    machine_info,
    percentile,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.meta.base import MetadataStore
from magnetar.meta.sqlite import SqliteMetadataStore
from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.zookeeper import ZooKeeperProcess

Op = Callable[[int], Awaitable[object]]


async def _timed(op: Op, n: int, writers: int = 1) -> tuple[float, list[float]]:
    latencies: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            start = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(writers)))
    return time.perf_counter() - start, latencies


def _store_ops(store: MetadataStore, value: bytes) -> dict[str, Op]:
    prefix = f"/bench-{uuid.uuid4().hex[:8]}"

    async def create(i: int) -> object:
        return await store.put(f"{prefix}/create/{i:08d}", value, expected_version=-1)

    async def cas(i: int) -> object:
        node = await store.get(f"{prefix}/cas")
        return await store.put(
            f"{prefix}/cas", value, expected_version=node.stat.version if node else -1
        )

    async def concurrent(i: int) -> object:
        return await store.put(f"{prefix}/concurrent/{i:08d}", value, expected_version=-1)

    return {"create": create, "cas": cas, "concurrent": concurrent}


def _kazoo_ops(zk: KazooClient, value: bytes) -> dict[str, Op]:
    """The peer: the same operations as plain kazoo calls (in a thread, as the store does)."""
    prefix = f"/kazoo-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(f"{prefix}/create")
    zk.ensure_path(f"{prefix}/concurrent")
    zk.create(f"{prefix}/cas", value)

    async def create(i: int) -> object:
        return await asyncio.to_thread(zk.create, f"{prefix}/create/{i:08d}", value)

    async def cas(i: int) -> object:
        def step() -> object:
            _, stat = zk.get(f"{prefix}/cas")
            return zk.set(f"{prefix}/cas", value, version=stat.version)

        return await asyncio.to_thread(step)

    async def concurrent(i: int) -> object:
        return await asyncio.to_thread(zk.create, f"{prefix}/concurrent/{i:08d}", value)

    return {"create": create, "cas": cas, "concurrent": concurrent}


async def _run(name: str, ops: dict[str, Op], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for workload, op in ops.items():
        writers = args.writers if workload == "concurrent" else 1
        elapsed, latencies = await _timed(op, args.ops, writers)
        rows.append(
            {
                "store": name,
                "workload": workload,
                "ops_per_s": args.ops / elapsed,
                "p50_s": percentile(latencies, 50),
                "p99_s": percentile(latencies, 99),
            }
        )
        print(f"  {name:10} {workload:10} {args.ops / elapsed:10.0f} ops/s", file=sys.stderr)
    return rows


async def main(args: argparse.Namespace) -> None:
    value = b"v" * args.value_bytes
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-meta-") as tmp:
        work = Path(tmp)
        with ZooKeeperProcess(work / "zk") as zk_server:
            sqlite = SqliteMetadataStore(work / "meta.db")
            zk_store = ZooKeeperMetadataStore(zk_server.url("/bench"))
            zk = KazooClient(hosts=zk_server.hosts)
            zk.start()
            try:
                rows = await _run("sqlite", _store_ops(sqlite, value), args)
                rows += await _run("zookeeper", _store_ops(zk_store, value), args)
                rows += await _run("kazoo", _kazoo_ops(zk, value), args)
            finally:
                zk.stop()
                zk.close()
                await zk_store.aclose()
                await sqlite.aclose()
    headers = ["store", "workload", "ops/s", "p50", "p99"]
    table = [
        [
            r["store"],
            r["workload"],
            fmt_rate(r["ops_per_s"]),
            fmt_ms(r["p50_s"]),
            fmt_ms(r["p99_s"]),
        ]
        for r in rows
    ]
    print(render_table(headers, table))
    print()
    print(render_markdown_table(headers, table))
    write_json(
        RESULTS_DIR / "metadata.json",
        {"when": utc_now(), "machine": machine_info(), "args": vars(args), "rows": rows},
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="operations per workload")
    parser.add_argument("--writers", type=int, default=16, help="concurrent writers")
    parser.add_argument("--value-bytes", type=int, default=200, help="bytes per value")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
