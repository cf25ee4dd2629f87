"""Spark source benchmark: rows/s into Spark through ``spark.read.format("magnetar")`` on a
mostly offloaded topic, next to the limit (pyarrow reading the same Parquet objects) and the
broker path (the same events through pulsar-client's Reader).

One non-partitioned topic of ``--messages`` events of 100 random bytes, each with one of
``--keys`` keys, written as Pulsar batches of ``--batch`` messages in segments of
``--segment-mb``. The data is built in-process (ManagedLedger.append, fsync=never, then
ManagedLedger.offload of every closed segment and its local copy dropped), except the last
``--local-messages``, which stay in a local segment (read over Arrow Flight; the segment open
while they were written is closed when the build's storage closes, as Pulsar closes a
ledger, so the server starts with it closed and a new, empty one open). Then a real
``magnetar standalone`` serves that data directory and:

* **Spark count()** — ``df.count()`` on a local[2] session: every row crosses from the
  executors' Python workers into the JVM as Arrow (the source reads every column; Python
  data sources get no column pruning).
* **Spark group-by** — ``df.groupBy("key").count().collect()``: the same scan plus a
  shuffle.
* the same two with a user-given schema (``.schema("offset long")``, ``.schema("key
  string")``): the source builds and ships only those columns.
* **local segment only** — ``count()`` from the first local offset: the storage node's
  Arrow Flight path, which rebuilds rows from stored entries in Python.
* **limit: pyarrow** — ``pyarrow.parquet.read_table`` of each offloaded object, all columns,
  in this process, one core (the objects were just read, so the page cache is warm for
  every reader alike).
* **broker path** — a ``pulsar.Reader`` from earliest through the Pulsar protocol, stopped
  after ``--client-seconds``; its rate is extrapolated to the whole topic.

Spark phases run ``--repeat`` times; the best run counts (the first also starts the Python
workers). Rows/s is events over wall-clock seconds of the action, planning included.

Run: ``PYTHONPATH=. .venv/bin/python bench/spark_source.py [--messages N] [--markdown]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import magnetar.protocols.pulsar.entry_format  # noqa: F401  (registers the PULSAR format)
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
from magnetar.core import formats
from magnetar.core.config import build_settings
from magnetar.ledger import ManagedLedger
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import open_metadata_store
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.frames import pack_payload
from magnetar.storage import SegmentState
from magnetar.testing.server import REPO, StandaloneProcess
from magnetar.tier import LocalObjectStore, Tier

MESSAGE_BYTES = 100
LEDGER = "public/default/bench-spark"  # the partition name the broker gives the topic
TOPIC = f"persistent://{LEDGER}"
COUNT, GROUP_BY = "Spark count() via magnetar", "Spark groupBy(key).count() via magnetar"
NARROW = " [schema: {}]"  # the same action with a user-given schema (only those columns)
LIMIT, BROKER = "limit: pyarrow read_table (Arrow)", "broker path: pulsar-client Reader"
FLIGHT = "Spark count() of the local segment only (Arrow Flight)"


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    messages: int
    seconds: float
    note: str = ""

    @property
    def rows_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "rows_per_s": self.rows_per_s}


# -- building the data --------------------------------------------------------------------


def batch_payload(first: int, size: int, keys: int) -> bytes:
    """A Pulsar batch of ``size`` keyed messages of random (incompressible) bytes."""
    values = os.urandom(MESSAGE_BYTES * size)
    messages = [
        BatchedMessage(
            pb.SingleMessageMetadata(partition_key=f"k{(first + i) % keys:04d}"),
            values[i * MESSAGE_BYTES : (i + 1) * MESSAGE_BYTES],
        )
        for i in range(size)
    ]
    metadata = pb.MessageMetadata(
        producer_name="bench", sequence_id=first, publish_time=0, num_messages_in_batch=size
    )
    return pack_payload(metadata, build_batch(messages))


async def append(ledger: ManagedLedger, first: int, count: int, args: argparse.Namespace) -> None:
    written = 0
    while written < count:
        size = min(args.batch, count - written)
        payload = batch_payload(first + written, size, args.keys)
        await ledger.append(payload, count=size, fmt=formats.PULSAR)
        written += size


async def build(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write the topic, offload all but the last ``--local-messages``; returns timings."""
    settings = build_settings(
        env={},
        overrides={
            "data_dir": data_dir,
            "fsync": "never",
            "segment_max_bytes": args.segment_mb << 20,
        },
    )
    meta = open_metadata_store(settings.metadata)
    storage = await LocalStorage.open(settings, meta)  # standalone's storage
    tier = Tier(LocalObjectStore(data_dir / "tier"), row_group_rows=args.row_group_rows)
    try:
        ledger = await ManagedLedger.open(LEDGER, storage, tier)
        offloaded = args.messages - args.local_messages
        start = time.perf_counter()
        await append(ledger, 0, offloaded, args)
        await storage.roll(LEDGER)
        wrote = time.perf_counter() - start
        print(f"wrote {offloaded:,} events in {wrote:.1f} s", flush=True)
        start = time.perf_counter()
        for seg in ledger.segments():
            if seg.state is SegmentState.CLOSED:
                await ledger.offload(seg.segment_id)
                await ledger.drop_local_copy(seg.segment_id)
        offload = time.perf_counter() - start
        print(f"offloaded them in {offload:.1f} s", flush=True)
        await append(ledger, offloaded, args.local_messages, args)
        segments = [
            (s.state.value, s.local, s.end_offset - s.first_offset) for s in ledger.segments()
        ]
    finally:
        tier.close()
        await storage.aclose()
        await meta.aclose()
    return {"write_seconds": wrote, "offload_seconds": offload, "segments": segments}


def register_topic(http_url: str) -> None:
    """Give the broker's metadata the topic whose ledger was written in-process."""
    request = urllib.request.Request(f"{http_url}/admin/v2/persistent/{LEDGER}", method="PUT")
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as e:
        if e.code != 409:  # 409: it exists already
            raise


# -- the phases ---------------------------------------------------------------------------


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def best_of(repeat: int, name: str, expected: int, action: Callable[[], int]) -> Phase:
    runs = []
    for i in range(repeat):
        start = time.perf_counter()
        rows = action()
        runs.append(time.perf_counter() - start)
        if rows != expected:
            raise SystemExit(f"{name}: {rows:,} rows, expected {expected:,}")
        print(f"  {name} run {i + 1}: {runs[-1]:.2f} s", flush=True)
    return Phase(name, expected, min(runs), f"runs {', '.join(f'{r:.2f}' for r in runs)} s")


def spark_phases(http_url: str, args: argparse.Namespace) -> list[Phase]:
    spark = spark_session()

    def source(schema: str | None = None, start: int = 0) -> Any:
        reader = spark.read.format("magnetar").option("url", http_url).option("topic", TOPIC)
        if schema:
            reader = reader.schema(schema)
        return reader.option("startingOffsets", json.dumps({TOPIC: {"0": start}})).load()

    def group_by(df: Any) -> int:
        return sum(r["count"] for r in df.groupBy("key").count().collect())

    try:
        return [
            best_of(args.repeat, COUNT, args.messages, source().count),
            best_of(args.repeat, GROUP_BY, args.messages, lambda: group_by(source())),
            best_of(
                args.repeat,
                COUNT + NARROW.format("offset long"),
                args.messages,
                source("offset long").count,
            ),
            best_of(
                args.repeat,
                GROUP_BY + NARROW.format("key string"),
                args.messages,
                lambda: group_by(source("key string")),
            ),
            best_of(
                args.repeat,
                FLIGHT,
                args.local_messages,
                source(start=args.messages - args.local_messages).count,
            ),
        ]
    finally:
        spark.stop()


def pyarrow_limit(tier_dir: Path) -> Phase:
    objects = sorted(tier_dir.rglob("*.parquet"))
    runs = []
    for _ in range(2):
        start = time.perf_counter()
        rows = sum(pq.read_table(path).num_rows for path in objects)
        runs.append(time.perf_counter() - start)
    return Phase(LIMIT, rows, min(runs), f"{len(objects)} objects, best of 2")


def broker_path(pulsar_url: str, args: argparse.Namespace) -> Phase:
    import pulsar

    client = pulsar.Client(pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, receiver_queue_size=10_000)
        read, start = 0, time.perf_counter()
        deadline = start + args.client_seconds
        while read < args.messages and time.perf_counter() < deadline:
            reader.read_next(30_000)
            read += 1
        seconds = time.perf_counter() - start
    finally:
        client.close()
    note = f"{read:,} read in {seconds:.1f} s, extrapolated to {args.messages:,}"
    return Phase(BROKER, args.messages, seconds * args.messages / read, note)


# -- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data_dir = workdir / "node"
    built = asyncio.run(build(data_dir, args))
    loads = [round(os.getloadavg()[0], 2)]
    with StandaloneProcess(data_dir) as server:
        register_topic(server.http_url)
        phases = spark_phases(server.http_url, args)
        loads.append(round(os.getloadavg()[0], 2))
        phases.append(pyarrow_limit(data_dir / "tier"))
        phases.append(broker_path(server.pulsar_url, args))
        loads.append(round(os.getloadavg()[0], 2))
    return {**built, "phases": phases, "load": loads}


def report(result: dict[str, Any], markdown: bool) -> None:
    phases: list[Phase] = result["phases"]
    by_name = {p.name: p for p in phases}
    limit, broker = by_name[LIMIT].rows_per_s, by_name[BROKER].rows_per_s
    rows = [
        [
            p.name,
            f"{p.messages:,}",
            f"{p.seconds:.2f}",
            fmt_rate(p.rows_per_s),
            f"{p.rows_per_s / limit:.2f}x",
            f"{p.rows_per_s / broker:.1f}x",
            p.note,
        ]
        for p in phases
    ]
    headers = ["phase", "rows", "seconds", "rows/s", "vs pyarrow", "vs broker", "note"]
    print()
    print((render_markdown_table if markdown else render_table)(headers, rows))
    local = sum(n for _, is_local, n in result["segments"] if is_local)
    print(
        f"\n{len(result['segments'])} segments, {local:,} events local (one segment), the "
        f"rest offloaded; load average {result['load']} (before/after Spark, end; 2 cores)"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=10_000_000)
    p.add_argument("--local-messages", type=int, default=100_000, help="left in a local segment")
    p.add_argument("--batch", type=int, default=1000, help="messages per Pulsar batch (entry)")
    p.add_argument("--keys", type=int, default=100, help="distinct keys (the group-by column)")
    p.add_argument("--segment-mb", type=int, default=128, help="segment size (MiB)")
    p.add_argument("--row-group-rows", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=2, help="runs of each Spark action")
    p.add_argument("--client-seconds", type=float, default=20.0, help="broker path time cap")
    p.add_argument("--dir", type=Path, help="where to write (default: the temp dir if on disk)")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "spark_source.json")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    if not 0 <= args.local_messages < args.messages or args.batch < 1 or args.repeat < 1:
        p.error("need 0 <= --local-messages < --messages, --batch >= 1, --repeat >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, fs = make_workdir(args.dir, prefix="magnetar-bench-spark-")
    started = utc_now()
    print(f"{started}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})", flush=True)
    try:
        result = run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(result, args.markdown)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_json(
        args.json,
        {
            "benchmark": "spark_source",
            "started": started,
            "command": " ".join(["bench/spark_source.py", *sys.argv[1:]]),
            "machine": machine_info(),
            "filesystem": dataclasses.asdict(fs),
            "config": {**config, "message_bytes": MESSAGE_BYTES},
            "write_seconds": result["write_seconds"],
            "offload_seconds": result["offload_seconds"],
            "segments": result["segments"],
            "load_average": result["load"],
            "phases": [p.to_json() for p in result["phases"]],
        },
    )
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
