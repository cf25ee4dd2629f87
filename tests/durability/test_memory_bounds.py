"""The tail cache holds at most its node-wide budget (issue 21, item 2).

Writing to a topic nobody reads used to grow the server by about what was written: evicted
entries were released only every 1,024 evictions, and the cap was per partition with no
node-wide limit. Now RSS stays within the budget plus a fixed overhead.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
BUDGET = 32 * MiB
MESSAGE = 256 * 1024
PARTITIONS = 4


def _rss(server: StandaloneProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _write(client: pulsar.Client, topics: list[str], megabytes: int) -> None:
    producers = [
        client.create_producer(t, batching_enabled=False, block_if_queue_full=True) for t in topics
    ]
    payload = b"x" * MESSAGE
    for i in range(megabytes * MiB // MESSAGE):
        producers[i % len(producers)].send_async(payload, None)
    for p in producers:
        p.flush()
        p.close()


def test_writing_far_more_than_the_budget_keeps_memory_flat(tmp_path: Path) -> None:
    args = ["--tail-cache-bytes", str(BUDGET), "--max-message-size", str(2 * MESSAGE)]
    topics = [f"persistent://public/default/mem-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
    with StandaloneProcess(tmp_path / "data", extra_args=args) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        try:
            _write(client, topics, 2 * BUDGET // MiB)  # warm up: the cache is full
            before = _rss(server)
            _write(client, topics, 300)
            after = _rss(server)
        finally:
            client.close()
    grown = after - before
    # Without a bound this grew by ~300 MiB; allow allocator slack, not the data written.
    assert grown < 64 * MiB, f"RSS grew by {grown / MiB:.0f} MiB writing 300 MiB"
