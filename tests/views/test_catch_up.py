"""LIVE means caught up (issue 18 item 3): a view that is behind when its standalone is
killed with SIGKILL restarts in CATCHING_UP, with progress, and turns LIVE only once it has
applied everything published before the restart; ``highWaterMark`` is the sources' end now,
not the creation-time value."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.cli.rest import RestClient
from magnetar.testing.server import StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "visits"
FULL = f"persistent://public/default/{TOPIC}"
ARGS = ["--spark-master", "local[2]", "--views-max-batch-events", "400"]
SQL = "SELECT key AS user, count(*) AS n FROM events GROUP BY key"


def _start(data: Path) -> tuple[StandaloneProcess, RestClient]:
    server = StandaloneProcess(data, extra_args=ARGS)
    server.startup_timeout = 120
    server.start()
    return server, RestClient(server.http_url, timeout=300)


def _publish(url: str, n: int, seed: int) -> None:
    client = pulsar.Client(url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=True, block_if_queue_full=True)
        for user, amount in h.events(n, seed=seed):
            body = json.dumps({"user": user, "amount": amount}).encode()
            producer.send_async(body, None, partition_key=user)
        producer.flush()
    finally:
        client.close()


def _applied(status: dict[str, Any]) -> int:
    return int(status["offsets"].get(FULL, {}).get("0", 0))


def test_a_view_restarted_behind_catches_up_before_it_is_live(tmp_path: Path) -> None:
    server, rest = _start(tmp_path / "node")
    try:
        _publish(server.pulsar_url, 100, seed=1)
        rest.call("PUT", "/views/visits", {"source": TOPIC, "sql": SQL, "key": "user"})
        created = h.wait_for(
            lambda: (s := h.view(rest, "visits"))["state"] == "LIVE" and s, 240, "LIVE"
        )
        assert created["highWaterMark"] == {FULL: {"0": 100}}
        _publish(server.pulsar_url, 12_000, seed=2)  # 30 batches of 400 to apply
        behind = h.view(rest, "visits")
        assert _applied(behind) < 12_100, "the view is behind when the server dies"
        assert behind["highWaterMark"] == {FULL: {"0": 12_100}}, "kept current"
    finally:
        server.kill()

    server, rest = _start(tmp_path / "node")
    try:
        seen: list[tuple[str, int]] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            status = h.view(rest, "visits")
            seen.append((status["state"], _applied(status)))
            if status["state"] == "LIVE":
                break
            time.sleep(0.1)
        assert status["state"] == "LIVE", seen[-5:]
        assert _applied(status) == 12_100, f"LIVE only when caught up; seen {seen[-5:]}"
        catching_up = [at for state, at in seen if state == "CATCHING_UP"]
        assert catching_up and min(catching_up) < 12_100, seen[:20]
        assert {state for state, _ in seen} <= {"CREATED", "CATCHING_UP", "LIVE"}, seen
        assert status["highWaterMark"] == status["catchUpTarget"] == {FULL: {"0": 12_100}}
        assert status["lag"] == {"messages": 0, "ms": 0} and status["progress"] == 1.0
        assert status["events"] == {"total": 12_100, "applied": 12_100}
        rows = h.rows_by(rest, "visits", "user")
        assert sum(r["n"] for r in rows.values()) == 12_100
    finally:
        server.stop()
