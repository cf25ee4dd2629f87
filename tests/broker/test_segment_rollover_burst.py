"""Segment size under a burst of batched sends (issue 12): a standalone run with
``--segment-max-bytes 65536`` closed segments of 124-540 KB, because the whole group commit
went into the open segment before the roll check. Sizes are read from the topic's
internalStats, as an operator would."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, run_standalone, unique

LIMIT = 64 * 1024
BATCH_BYTES = 16 * 1024  # the producer closes a batch once it holds this much payload
# One stored entry: a batch (its payload can pass BATCH_BYTES by the last message) plus the
# per-message and per-entry metadata. Twice the batch size bounds it with room to spare.
MAX_ENTRY = 2 * BATCH_BYTES


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory, "--segment-max-bytes", str(LIMIT))


def _burst(client: pulsar.Client, topic: str, n: int) -> None:
    """``n`` messages of 200 B through send_async, every callback checked."""
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=BATCH_BYTES,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
    )
    failures: list[pulsar.Result] = []
    lock = threading.Lock()

    def done(result: pulsar.Result, _id: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            with lock:
                failures.append(result)

    for i in range(n):
        producer.send_async(f"{i:06d}".encode().ljust(200, b"."), done)
    producer.flush()
    producer.close()
    assert not failures


def test_a_batched_burst_rolls_segments_within_one_entry_of_the_limit(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    local = unique("burst")
    _burst(client, f"persistent://public/default/{local}", 20_000)
    stats = AdminHttp(standalone.http_url).get(
        f"/admin/v2/persistent/public/default/{local}/internalStats"
    )
    closed = [s for s in stats["ledgers"] if s["state"] == "CLOSED"]
    assert len(closed) >= 20  # ~4 MB of payload in 64 KiB segments
    too_big = [s["size"] for s in closed if s["size"] > LIMIT + MAX_ENTRY]
    assert not too_big, f"segments closed over {LIMIT} + one entry: {too_big}"
    assert all(s["size"] >= LIMIT for s in closed)  # none closed early either
    # Every message is in some segment, each once.
    assert sum(s["lastOffset"] - s["firstOffset"] + 1 for s in stats["ledgers"]) == 20_000
