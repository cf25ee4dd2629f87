"""A subscription behind the retention start moves past the deleted messages instead of
stalling (issue 13, hazard 2).

Retention waits for durable subscriptions, but not for readers (non-durable) — and a seek
or a Kafka commit can place a cursor anywhere. Reading a deleted offset used to end the
subscription's dispatcher for good, and every later append failed it again: the reader got
nothing, not even the messages still stored. Pulsar moves such cursors past the deleted
ledgers; Magnetar does the same and counts what was skipped in the stats.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

ARGS = ["--segment-max-entries", "10", "--retention-check-interval", "0.2"]


def _http(server: StandaloneProcess, method: str, path: str, body: object = None) -> object:
    req = urllib.request.Request(
        server.http_url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def test_a_reader_behind_retention_resumes_at_the_first_retained_message(
    tmp_path: Path,
) -> None:
    topic = f"persistent://public/default/skip-{uuid.uuid4().hex[:8]}"
    path = urllib.parse.quote(topic.removeprefix("persistent://"))
    with StandaloneProcess(tmp_path / "data", extra_args=ARGS) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(35):
                producer.send(str(i).encode())
            # A reader at the start with a tiny queue: it has read nothing much yet.
            reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=1)
            assert reader.read_next(10_000).data() == b"0"
            _http(
                server,
                "POST",
                "/admin/v2/namespaces/public/default/retention",
                {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
            )
            deadline = time.monotonic() + 30
            while (
                len(_http(server, "GET", f"/admin/v2/persistent/{path}/internal-stats")["ledgers"])
                > 1
            ):  # type: ignore[index]
                assert time.monotonic() < deadline, "retention never trimmed"
                time.sleep(0.1)
            for i in range(35, 40):
                producer.send(str(i).encode())
            seen = []
            while not seen or seen[-1] != b"39":
                seen.append(reader.read_next(10_000).data())
            values = [int(v) for v in seen]
            assert values[-5:] == [35, 36, 37, 38, 39]
            assert values == sorted(values), "order kept"
            # At most the reader's queued messages came from before the cut; the rest of
            # the deleted ones were skipped, not waited on.
            stats = _http(server, "GET", f"/admin/v2/persistent/{path}/stats")
            [sub] = stats["subscriptions"].values()  # type: ignore[index]
            assert sub["msgSkippedByRetention"] > 0
        finally:
            client.close()
