"""Entry codec benchmark: stored entries → Arrow rows (``entries_to_table``) and back
(``table_to_entries``), next to the physical peer: pyarrow reading the same rows from an
in-memory Parquet file.

``entries_to_table`` is what the Arrow Flight bulk read server and the offloader pay per
message; ``table_to_entries`` is what a Pulsar or Kafka consumer reading offloaded data pays.
Each scenario builds ``--entries`` Pulsar entries of ``--batch`` messages, as a batching
producer sends them (the C++ and Java clients put a sequence id in every message's metadata):

* **keyed** — a partition key and a 13-byte JSON value per message, uncompressed.
* **props+event** — the same plus two properties and an event time per message.
* **keyed lz4** — *keyed*, the batch LZ4-compressed (what the clients default to).
* **unbatched** — ``--batch`` times as many entries of one non-batched message each.

Every figure is the best of ``--repeat`` runs, in rows (messages) per second. The peer is
``pyarrow.parquet.read_table`` of the table ``entries_to_table`` made, written to memory
with the offloader's compression (zstd).

Run: ``PYTHONPATH=. .venv/bin/python bench/entry_codec.py [--entries N] [--batch N]``
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import (
    RESULTS_DIR,
    best_seconds,
    fmt_rate,
    machine_info,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.protocols.pulsar import compression
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.frames import pack_payload
from magnetar.tier.parquet import entries_to_table, table_to_entries

PUBLISH_TIME = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    batched: bool = True
    properties: bool = False
    codec: int = compression.NONE


SCENARIOS = (
    Scenario("keyed"),
    Scenario("props+event", properties=True),
    Scenario("keyed lz4", codec=compression.LZ4),
    Scenario("unbatched", batched=False),
)


@dataclass(frozen=True, slots=True)
class Result:
    scenario: str
    rows: int
    to_table: float  # rows/s
    to_entries: float
    pyarrow_read: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- entries ------------------------------------------------------------------------------------


def value(n: int) -> bytes:
    """A 13-byte JSON document."""
    return b'{"id":%06d}' % (n % 1_000_000)


def single(scenario: Scenario, n: int) -> pb.SingleMessageMetadata:
    metadata = pb.SingleMessageMetadata(partition_key=f"user-{n % 1000}", sequence_id=n)
    if scenario.properties:
        metadata.event_time = PUBLISH_TIME - 1000 + n % 1000
        metadata.properties.add(key="type", value="click")
        metadata.properties.add(key="source", value=f"web-{n % 7}")
    return metadata


def batch_entry(scenario: Scenario, first: int, size: int) -> bytes:
    messages = [BatchedMessage(single(scenario, n), value(n)) for n in range(first, first + size)]
    data = build_batch(messages)
    metadata = pb.MessageMetadata(
        producer_name="bench-producer",
        sequence_id=first,
        publish_time=PUBLISH_TIME,
        num_messages_in_batch=size,
    )
    if scenario.codec != compression.NONE:
        metadata.compression = scenario.codec  # type: ignore[assignment]
        metadata.uncompressed_size = len(data)
    return pack_payload(metadata, compression.compress(scenario.codec, data))


def single_entry(n: int) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="bench-producer",
        sequence_id=n,
        publish_time=PUBLISH_TIME,
        partition_key=f"user-{n % 1000}",
    )
    return pack_payload(metadata, value(n))


def build_entries(scenario: Scenario, entries: int, batch: int) -> list[Entry]:
    if not scenario.batched:
        return [
            Entry(n, 1, PUBLISH_TIME, -1, formats.PULSAR, single_entry(n))
            for n in range(entries * batch)
        ]
    return [
        Entry(
            i * batch,
            batch,
            PUBLISH_TIME,
            -1,
            formats.PULSAR,
            batch_entry(scenario, i * batch, batch),
        )
        for i in range(entries)
    ]


# -- measuring ----------------------------------------------------------------------------------


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=100_000)
    return sink.getvalue()


def measure(scenario: Scenario, args: argparse.Namespace) -> Result:
    entries = build_entries(scenario, args.entries, args.batch)
    table = entries_to_table(entries)
    rows = table.num_rows
    rebuilt = list(table_to_entries(table, segment_id=0))
    if entries_to_table(rebuilt) != table:
        raise SystemExit(f"{scenario.name}: rebuilt entries do not give the same rows")
    data = parquet_bytes(table)
    to_table = best_seconds(lambda: entries_to_table(entries), args.repeat)
    to_entries = best_seconds(lambda: list(table_to_entries(table, 0)), args.repeat)
    read = best_seconds(lambda: pq.read_table(io.BytesIO(data)), args.repeat)
    return Result(scenario.name, rows, rows / to_table, rows / to_entries, rows / read)


# -- the run ------------------------------------------------------------------------------------


def report(results: Sequence[Result], markdown: bool) -> None:
    rows = [
        [
            r.scenario,
            f"{r.rows:,}",
            fmt_rate(r.to_table),
            fmt_rate(r.to_entries),
            fmt_rate(r.pyarrow_read),
            f"{r.to_table / r.pyarrow_read:.3f}x",
        ]
        for r in results
    ]
    headers = [
        "scenario",
        "rows",
        "entries→table rows/s",
        "table→entries rows/s",
        "pyarrow read rows/s",
        "to_table vs pyarrow",
    ]
    print()
    print((render_markdown_table if markdown else render_table)(headers, rows))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--entries", type=int, default=50, help="entries per batched scenario")
    p.add_argument("--batch", type=int, default=2000, help="messages per Pulsar batch (entry)")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (the best counts)")
    p.add_argument("--only", action="append", help="run only this scenario (repeatable)")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "entry_codec.json")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    if args.entries < 1 or args.batch < 1 or args.repeat < 1:
        p.error("--entries, --batch and --repeat must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = utc_now()
    print(f"{started}  {machine_info()}", flush=True)
    results = []
    for scenario in SCENARIOS:
        if args.only and scenario.name not in args.only:
            continue
        results.append(measure(scenario, args))
        print(results[-1], flush=True)
    report(results, args.markdown)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_json(
        args.json,
        {
            "benchmark": "entry_codec",
            "started": started,
            "command": " ".join(["bench/entry_codec.py", *sys.argv[1:]]),
            "machine": machine_info(),
            "config": config,
            "results": [r.to_json() for r in results],
        },
    )
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
