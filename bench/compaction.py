"""Topic compaction benchmark: how fast a compaction run gets through a large topic, next to
peers measured on the same entries in the same run.

One partition of ``--messages`` messages of 100 random bytes with keys drawn from ``--keys``
distinct keys (about 1 % tombstones), written as Pulsar batches of ``--batch`` messages with
fsync=never (building the data, not measured):

* **magnetar** — ``TopicCompaction.compact()``: pass 1 reads every entry and keeps the latest
  offset per key, pass 2 reads them again and writes the retained messages to the compacted
  ledger beside the topic (fsync=never), then records the view.
* **peer: dict pass** — the same ``ManagedLedger.read`` walk and the same key extraction
  (``compaction_keys_of``) into a Python dict: one pass, nothing written — what pass 1 alone
  costs, a floor for any pure-Python compactor reading this ledger.
* **peer: pyarrow group-by** — the (key, offset) rows already in memory as an Arrow table,
  ``group_by("key").aggregate(offset max)``: the reduction alone, with no reading or parsing.

Rates are messages of the topic per second; the run also reports the keys left.

Run: ``PYTHONPATH=. .venv/bin/python bench/compaction.py [--messages N] [--keys K]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

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
from magnetar.broker.compaction import TopicCompaction
from magnetar.core import formats
from magnetar.core.config import build_settings
from magnetar.ledger import LedgerFactory, ManagedLedger
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import open_metadata_store
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.frames import pack_payload

TOPIC = "public/default/bench-compaction"
MESSAGE_BYTES = 100
READ_ENTRIES = 1000


def batch_payload(keys: list[int], rng: random.Random) -> bytes:
    values = os.urandom(MESSAGE_BYTES * len(keys))
    messages = []
    for i, key in enumerate(keys):
        tombstone = rng.random() < 0.01
        meta = pb.SingleMessageMetadata(partition_key=f"key-{key}", null_value=tombstone)
        value = b"" if tombstone else values[i * MESSAGE_BYTES : (i + 1) * MESSAGE_BYTES]
        messages.append(BatchedMessage(meta, value))
    metadata = pb.MessageMetadata(
        producer_name="bench", sequence_id=0, publish_time=0, num_messages_in_batch=len(keys)
    )
    return pack_payload(metadata, build_batch(messages))


async def write(ledger: ManagedLedger, messages: int, keys: int, batch: int) -> float:
    rng = random.Random(17)
    start, written = time.perf_counter(), 0
    while written < messages:
        size = min(batch, messages - written)
        chosen = [rng.randrange(keys) for _ in range(size)]
        await ledger.append(batch_payload(chosen, rng), count=size, fmt=formats.PULSAR)
        written += size
    return time.perf_counter() - start


async def dict_pass(ledger: ManagedLedger) -> tuple[float, dict[bytes, int], list[Any]]:
    """The peer: one read walk, keys into a dict (tombstones remove)."""
    start = time.perf_counter()
    latest: dict[bytes, int] = {}
    rows: list[Any] = []
    offset = ledger.start_offset
    while offset < ledger.end_offset:
        entries = await ledger.read(offset, max_entries=READ_ENTRIES)
        for entry in entries:
            for i, (key, null) in enumerate(
                formats.compaction_keys_of(entry.format, entry.payload) or []
            ):
                if key is None:
                    continue
                if null:
                    latest.pop(key, None)
                else:
                    latest[key] = entry.base_offset + i
        offset = entries[-1].next_offset
    elapsed = time.perf_counter() - start
    return elapsed, latest, rows


def group_by(ledger_rows: tuple[list[bytes], list[int]]) -> tuple[float, int]:
    keys, offsets = ledger_rows
    table = pa.table({"key": keys, "offset": offsets})
    start = time.perf_counter()
    result = table.group_by("key").aggregate([("offset", "max")])
    return time.perf_counter() - start, result.num_rows


async def collect_rows(ledger: ManagedLedger) -> tuple[list[bytes], list[int]]:
    keys, offsets = [], []
    offset = ledger.start_offset
    while offset < ledger.end_offset:
        entries = await ledger.read(offset, max_entries=READ_ENTRIES)
        for entry in entries:
            for i, (key, _) in enumerate(
                formats.compaction_keys_of(entry.format, entry.payload) or []
            ):
                keys.append(key or b"")
                offsets.append(entry.base_offset + i)
        offset = entries[-1].next_offset
    return keys, offsets


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = build_settings(env={}, overrides={"data_dir": workdir / "node", "fsync": "never"})
    meta = open_metadata_store(settings.metadata)
    storage = await LocalStorage.open(settings, meta)  # standalone's storage
    try:
        ledgers = LedgerFactory(storage)
        ledger = await ledgers.open(TOPIC)
        build = await write(ledger, args.messages, args.keys, args.batch)
        print(f"wrote {args.messages:,} messages in {build:.1f} s (not compared)", flush=True)

        peer_s, latest, _ = await dict_pass(ledger)
        compaction = TopicCompaction(TOPIC, ledger, ledgers, meta)
        start = time.perf_counter()
        view = await compaction.compact()
        magnetar_s = time.perf_counter() - start
        arrow_s, groups = group_by(await collect_rows(ledger))
        retained = sum(1 for _ in [r async for r in view.records()])
    finally:
        await storage.aclose()
        await meta.aclose()
    n = args.messages
    rows = [
        ["magnetar compact() (2 reads + write)", f"{magnetar_s:.2f}", fmt_rate(n / magnetar_s)],
        ["peer: dict pass (1 read, no write)", f"{peer_s:.2f}", fmt_rate(n / peer_s)],
        ["peer: pyarrow group_by (in memory)", f"{arrow_s:.2f}", fmt_rate(n / arrow_s)],
    ]
    headers = ["run", "seconds", "messages/s"]
    print(render_table(headers, rows))
    print(
        f"{n:,} messages, {args.keys:,} keys drawn, {len(latest):,} keys left "
        f"(entries kept in the view: {retained:,}; arrow groups incl. tombstoned: {groups:,}); "
        f"magnetar / dict pass = {peer_s / magnetar_s:.2f}"
    )
    print(render_markdown_table(headers, rows))
    return {
        "messages": n,
        "keys_drawn": args.keys,
        "keys_left": len(latest),
        "batch": args.batch,
        "magnetar_s": magnetar_s,
        "dict_pass_s": peer_s,
        "arrow_group_by_s": arrow_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args(argv)
    workdir, _ = make_workdir(None, prefix="magnetar-bench-compaction-")
    try:
        result = asyncio.run(run(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    write_json(
        RESULTS_DIR / "compaction.json",
        {"when": utc_now(), "machine": machine_info(), "args": vars(args), "result": result},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
