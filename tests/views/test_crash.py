"""Exactly once across crashes: counting views (SQL and Python) while events keep arriving;
the standalone is killed with SIGKILL during the backfill and during the live phase, several
times; after each restart the views resume from their checkpoint and state store, and in the
end every count equals a reference read straight from the topic."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pulsar
import pytest

from magnetar.cli.rest import RestClient
from magnetar.testing.server import REPO, StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "clicks"
FULL = f"persistent://public/default/{TOPIC}"
ARGS = ["--spark-master", "local[2]", "--views-max-batch-events", "3000"]
ARGS += ["--views-python-path", str(REPO)]  # tests.views.transforms
SQL = "SELECT key AS user, count(*) AS n FROM events GROUP BY key"


class Publisher(threading.Thread):
    """Publishes until told to stop or until the server dies under it."""

    def __init__(self, url: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.url, self.seed, self.stop_flag, self.sent = url, seed, threading.Event(), 0

    def run(self) -> None:
        client = pulsar.Client(self.url, operation_timeout_seconds=5)
        try:
            producer = client.create_producer(TOPIC, send_timeout_millis=3000)
            for round_ in range(10_000):
                if self.stop_flag.is_set():
                    break
                for user, amount in h.events(20, seed=self.seed * 100_000 + round_):
                    body = json.dumps({"user": user, "amount": amount}).encode()
                    producer.send_async(body, None, partition_key=user)
                producer.flush()
                self.sent += 20
                self.stop_flag.wait(0.05)  # pace: ~400 events/s, a live load the views keep up with
        except Exception:  # the server was killed: what was acknowledged is in the topic
            pass
        finally:
            client.close()


def _start(data: Path, servers: list[StandaloneProcess]) -> tuple[StandaloneProcess, RestClient]:
    server = StandaloneProcess(data, extra_args=ARGS)
    server.startup_timeout = 120
    servers.append(server)
    server.start()
    return server, RestClient(server.http_url, timeout=300)


def _topic_contents(url: str) -> Counter[str]:
    client = pulsar.Client(url)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        found: Counter[str] = Counter()
        while reader.has_message_available():
            message = reader.read_next(10_000)
            assert json.loads(message.data())["user"] == message.partition_key()
            found[message.partition_key()] += 1
        return found
    finally:
        client.close()


def _wait_state(rest: RestClient, name: str, check: str) -> None:
    h.wait_for(lambda: h.view(rest, name)["state"] == check, 240, f"{name} {check}")


def test_counts_survive_sigkill_during_backfill_and_live(tmp_path: Path) -> None:
    servers: list[StandaloneProcess] = []
    try:
        _crash_rounds(tmp_path / "node", servers)
    finally:
        for server in servers:
            server.kill()


def _crash_rounds(data: Path, servers: list[StandaloneProcess]) -> None:
    server, rest = _start(data, servers)
    client = pulsar.Client(server.pulsar_url)
    producer = client.create_producer(TOPIC, batching_enabled=True)
    for user, amount in h.events(6000, seed=7):
        body = json.dumps({"user": user, "amount": amount}).encode()
        producer.send_async(body, None, partition_key=user)
    producer.flush()
    client.close()
    rest.call("PUT", "/views/sqlcount", {"source": TOPIC, "sql": SQL, "key": "user"})
    python = {"source": TOPIC, "python": "tests.views.transforms:count", "key": "key"}
    rest.call("PUT", "/views/pycount", python)
    # Kill 1: in the middle of the backfill.
    h.wait_for(lambda: 0 < h.view(rest, "pycount")["progress"] < 1, 120, "pycount backfilling")
    server.kill()
    for round_ in range(2):  # kills 2-3: live, with events arriving
        server, rest = _start(data, servers)
        for name in ("sqlcount", "pycount"):
            _wait_state(rest, name, "LIVE")
        publisher = Publisher(server.pulsar_url, seed=round_)
        publisher.start()
        h.wait_for(lambda p=publisher: p.sent >= 400, 60, "events arriving live")
        server.kill()
        publisher.stop_flag.set()
        publisher.join(60)
    server, rest = _start(data, servers)
    try:
        end = rest.call("GET", f"/magnetar/v1/topics/public/default/{TOPIC}/plan")
        end_offset = end["partitions"][0]["end"]
        expected = _topic_contents(server.pulsar_url)
        assert sum(expected.values()) == end_offset
        for name, column in (("sqlcount", "user"), ("pycount", "key")):
            h.wait_for(lambda n=name: h.reached(rest, n, TOPIC, end_offset), 240, f"{name} done")
            got = {u: r["n"] for u, r in h.rows_by(rest, name, column).items()}
            assert got == dict(expected), name
    finally:
        server.stop()
