"""Tiered storage benchmark: offload throughput, and catch-up reads from offloaded segments
against local ones, next to the limit: pyarrow.parquet reading the same objects directly.

One partition of ``--messages`` messages of 100 random bytes, written as Pulsar batches of
``--batch`` messages (what a batching producer sends), in segments of ``--segment-mb``:

* **write** — ``ManagedLedger.append`` with fsync=never (building the data, not measured
  against anything).
* **local catch-up** — standalone's storage (``LocalStorage``) is reopened (empty tail
  cache), segment files are dropped from the page cache, and ``ManagedLedger.read`` walks
  the partition from offset 0 to its end, the way a subscription catching up does.
* **offload** — ``ManagedLedger.offload`` of every closed segment: read the segment, unpack
  each batch into one row per message, write Parquet (zstd), upload to a local-directory
  object store, read it back and verify checksum and row count. MB/s is message payload
  (100 B/message) per second, the same measure everywhere here.
* **offloaded catch-up** — local copies dropped, storage reopened (cold reader cache, objects
  dropped from the page cache), the same ``ManagedLedger.read`` walk: now every closed
  segment is read from Parquet and its entries rebuilt.
* **limit** — ``pyarrow.parquet.read_table`` of each object (all columns into Arrow, objects
  dropped from the page cache first), and the same plus turning the value column into
  Python bytes (what any Python consumer of the rows pays at least); for the offload, the
  same rows written back with ``pyarrow.parquet.write_table`` (zstd) into memory.
* **pulsar-client** (``--client-messages`` > 0) — a real ``magnetar standalone`` on the same
  data, and a ``pulsar.Reader`` from earliest reading that many messages: once while the
  segments are local, once after they are offloaded.

* **Iceberg** (``--iceberg-messages`` > 0) — JSON values offloaded into the topic's Iceberg
  table with typed columns, and the table scanned by pyiceberg, each next to pyarrow doing
  the same work in the same run (``bench/tiered_iceberg.py``).

Run: ``PYTHONPATH=. .venv/bin/python bench/tiered.py [--messages N] [--client-messages N]
[--iceberg-messages N]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import magnetar.protocols.pulsar.entry_format  # noqa: F401  (registers the PULSAR format)
from bench.common import (
    MB,
    RESULTS_DIR,
    fmt_rate,
    machine_info,
    make_workdir,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from bench.storage import evict_page_cache
from bench.tiered_iceberg import run_iceberg
from magnetar.core import formats
from magnetar.core.config import Settings, build_settings
from magnetar.ledger import ManagedLedger
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.frames import pack_payload
from magnetar.storage import SegmentState
from magnetar.testing.server import StandaloneProcess
from magnetar.tier import LocalObjectStore, Tier

MESSAGE_BYTES = 100
TOPIC = "public/default/bench-tiered"  # the partition name a broker gives this topic
READ_ENTRIES = 1000  # entries per ManagedLedger.read, local and offloaded alike
LIMIT = "limit: pyarrow read_table (Arrow)"


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    messages: int
    seconds: float
    note: str = ""

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


@dataclass(slots=True)
class Node:
    """Standalone's storage, tier and ledger of the benchmark's data directory."""

    settings: Settings
    meta: MetadataStore
    storage: LocalStorage  # standalone's storage: the writer over the engine's ledgers
    tier: Tier
    ledger: ManagedLedger

    @classmethod
    async def open(cls, settings: Settings, row_group_rows: int) -> Node:
        meta = open_metadata_store(settings.metadata)
        storage = await LocalStorage.open(settings, meta)
        tier = Tier(LocalObjectStore(settings.data_dir / "tier"), row_group_rows=row_group_rows)
        ledger = await ManagedLedger.open(TOPIC, storage, tier)
        return cls(settings, meta, storage, tier, ledger)

    async def aclose(self) -> None:
        self.tier.close()
        await self.storage.aclose()
        await self.meta.aclose()


# -- phases -------------------------------------------------------------------------------------


def batch_payload(size: int) -> bytes:
    """A batch as a producer sends it: ``size`` messages of random (incompressible) bytes."""
    values = os.urandom(MESSAGE_BYTES * size)
    messages = [
        BatchedMessage(
            pb.SingleMessageMetadata(), values[i * MESSAGE_BYTES : (i + 1) * MESSAGE_BYTES]
        )
        for i in range(size)
    ]
    metadata = pb.MessageMetadata(
        producer_name="bench", sequence_id=0, publish_time=0, num_messages_in_batch=size
    )
    return pack_payload(metadata, build_batch(messages))


async def write(node: Node, messages: int, batch: int) -> Phase:
    start, written = time.perf_counter(), 0
    while written < messages:
        size = min(batch, messages - written)
        await node.ledger.append(batch_payload(size), count=size, fmt=formats.PULSAR)
        written += size
    return Phase("write (fsync=never, not compared)", written, time.perf_counter() - start)


async def catch_up(node: Node, name: str) -> Phase:
    """Read the partition from its first offset to its end, as a subscription catching up."""
    ledger = node.ledger
    offset, end = ledger.start_offset, ledger.end_offset
    start = time.perf_counter()
    while offset < end:
        entries = await ledger.read(offset, max_entries=READ_ENTRIES, max_bytes=64 << 20)
        offset = entries[-1].next_offset
    return Phase(name, end - ledger.start_offset, time.perf_counter() - start)


async def offload(node: Node) -> tuple[Phase, int, int]:
    """Offload every closed segment; also returns (segments, object bytes)."""
    closed = [s for s in node.ledger.segments() if s.state is SegmentState.CLOSED]
    start, size = time.perf_counter(), 0
    for seg in closed:
        done = await node.ledger.offload(seg.segment_id)
        assert done.offload is not None
        size += int(done.offload["size"])
    seconds = time.perf_counter() - start
    messages = sum(s.end_offset - s.first_offset for s in closed)
    return Phase("offload (→ Parquet, verified)", messages, seconds), len(closed), size


def pyarrow_limit(tier_dir: Path) -> list[Phase]:
    """Each read twice, the objects dropped from the page cache before each; the faster
    counts (the first also warms pyarrow and the virtual disk's host-side cache). Also the
    writing side: the same rows written back as Parquet (zstd) into memory."""
    objects = sorted(tier_dir.rglob("*.parquet"))

    def timed(read: Callable[[Path], int]) -> tuple[int, float]:
        runs = []
        for _ in range(2):
            evict_page_cache(tier_dir)
            start = time.perf_counter()
            rows = sum(read(path) for path in objects)
            runs.append((rows, time.perf_counter() - start))
        return min(runs, key=lambda run: run[1])

    arrow = Phase(LIMIT, *timed(lambda path: pq.read_table(path).num_rows))
    python = Phase(
        "limit: pyarrow → Python values",
        *timed(lambda path: len(pq.read_table(path).column("value").to_pylist())),
    )
    tables = [pq.read_table(path) for path in objects]
    start = time.perf_counter()
    for table in tables:
        pq.write_table(table, io.BytesIO(), compression="zstd", row_group_size=100_000)
    written = Phase(
        "limit: pyarrow write_table (zstd, same rows)",
        sum(t.num_rows for t in tables),
        time.perf_counter() - start,
    )
    return [arrow, python, written]


def client_catch_up(data_dir: Path, messages: int, name: str) -> Phase:
    """A pulsar.Reader from earliest on a standalone node over the same data."""
    import pulsar

    with StandaloneProcess(data_dir) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        try:
            reader = client.create_reader(
                f"persistent://{TOPIC}", pulsar.MessageId.earliest, receiver_queue_size=10_000
            )
            start = time.perf_counter()
            for _ in range(messages):
                reader.read_next(30_000)
            seconds = time.perf_counter() - start
        finally:
            client.close()
    return Phase(name, messages, seconds)


# -- the run ------------------------------------------------------------------------------------


async def reopened(node: Node, args: argparse.Namespace) -> Node:
    await node.aclose()
    evict_page_cache(node.settings.data_dir)
    return await Node.open(node.settings, args.row_group_rows)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = build_settings(
        env={},
        overrides={
            "data_dir": workdir / "node",
            "fsync": "never",
            "segment_max_bytes": args.segment_mb << 20,
        },
    )
    node = await Node.open(settings, args.row_group_rows)
    phases = [await write(node, args.messages, args.batch)]
    await node.storage.roll(TOPIC)  # every message in a closed segment: all of it offloads
    print(phases[-1], flush=True)
    node = await reopened(node, args)
    phases.append(await catch_up(node, "catch-up, local segments (ManagedLedger.read)"))
    print(phases[-1], flush=True)
    if args.client_messages:
        await node.aclose()
        phases.append(
            client_catch_up(
                settings.data_dir, args.client_messages, "pulsar-client Reader, local segments"
            )
        )
        print(phases[-1], flush=True)
        node = await Node.open(settings, args.row_group_rows)
    done, segments, object_bytes = await offload(node)
    phases.append(done)
    print(phases[-1], flush=True)
    for seg in node.ledger.segments():
        if seg.state is SegmentState.OFFLOADED:
            await node.ledger.drop_local_copy(seg.segment_id)
    node = await reopened(node, args)
    phases.append(await catch_up(node, "catch-up, offloaded segments (ManagedLedger.read)"))
    print(phases[-1], flush=True)
    remote = sum(s.end_offset - s.first_offset for s in node.ledger.segments() if not s.local)
    await node.aclose()
    phases += pyarrow_limit(settings.data_dir / "tier")
    print(phases[-3:], flush=True)
    if args.client_messages:
        phases.append(
            client_catch_up(
                settings.data_dir, args.client_messages, "pulsar-client Reader, offloaded segments"
            )
        )
        print(phases[-1], flush=True)
    iceberg = []
    if args.iceberg_messages:
        iceberg = await run_iceberg(workdir, args.iceberg_messages, args.batch, args.segment_mb)
        print(iceberg, flush=True)
    return {
        "iceberg": iceberg,
        "load": [round(os.getloadavg()[0], 2)],
        "phases": phases,
        "segments": segments,
        "object_bytes": object_bytes,
        "remote_messages": remote,
    }


def report(result: dict[str, Any], markdown: bool) -> None:
    phases: list[Phase] = result["phases"]
    by_name = {p.name: p for p in phases}
    limit = by_name[LIMIT].msgs_per_s
    rows = [
        [
            p.name,
            f"{p.messages:,}",
            f"{p.seconds:.2f}",
            fmt_rate(p.msgs_per_s),
            fmt_rate(p.mb_per_s),
            "-" if p.name.startswith("write") else f"{p.msgs_per_s / limit:.2f}x",
        ]
        for p in phases
    ]
    headers = ["phase", "messages", "seconds", "msgs/s", "MB/s", "vs pyarrow"]
    print()
    print((render_markdown_table if markdown else render_table)(headers, rows))
    if result["iceberg"]:
        pairs = [
            [
                p.name,
                f"{p.rows:,}",
                fmt_rate(p.rows / p.seconds),
                p.peer,
                fmt_rate(p.rows / p.peer_seconds),
                f"{p.ratio:.2f}x " + (f"(goal {p.goal}x)" if p.goal else "(no goal: context)"),
            ]
            for p in result["iceberg"]
        ]
        heads = ["Iceberg phase", "rows", "rows/s", "peer (same run)", "rows/s", "vs peer"]
        print()
        print((render_markdown_table if markdown else render_table)(heads, pairs))
    payload = result["remote_messages"] * MESSAGE_BYTES
    print(
        f"\n{result['segments']} segments offloaded into {result['object_bytes'] / MB:,.1f} MB of "
        f"Parquet for {payload / MB:,.1f} MB of payload; load average {result['load']} "
        "(start, end; 2 cores)"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=5_000_000)
    p.add_argument("--batch", type=int, default=100, help="messages per Pulsar batch (entry)")
    p.add_argument("--segment-mb", type=int, default=128, help="segment size (MiB)")
    p.add_argument("--row-group-rows", type=int, default=100_000)
    p.add_argument("--client-messages", type=int, default=0, help="pulsar-client phase size")
    p.add_argument("--iceberg-messages", type=int, default=0, help="Iceberg phase size (0: off)")
    p.add_argument("--dir", type=Path, help="where to write (default: the temp dir if on disk)")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "tiered.json")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    if args.messages < 1 or args.batch < 1 or args.client_messages > args.messages:
        p.error("--messages and --batch must be >= 1, --client-messages <= --messages")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, fs = make_workdir(args.dir, prefix="magnetar-bench-tiered-")
    started = utc_now()
    print(f"{started}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})", flush=True)
    load = round(os.getloadavg()[0], 2)
    try:
        result = asyncio.run(run(args, workdir))
        result["load"] = [load, *result["load"]]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(result, args.markdown)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_json(
        args.json,
        {
            "benchmark": "tiered",
            "started": started,
            "command": " ".join(["bench/tiered.py", *sys.argv[1:]]),
            "machine": machine_info(),
            "filesystem": dataclasses.asdict(fs),
            "config": {**config, "message_bytes": MESSAGE_BYTES},
            "segments": result["segments"],
            "object_bytes": result["object_bytes"],
            "load_average": result["load"],
            "phases": [p.to_json() for p in result["phases"]],
            "iceberg": [p.to_json() for p in result["iceberg"]],
        },
    )
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
