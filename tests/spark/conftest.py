"""Fixtures for the Spark source tests: one real standalone for the whole package (small
segments, quick offload and retention sweeps), a pulsar client, the admin API, and helpers
that produce, offload and poll with deadlines.

The Spark session itself is the run-wide ``spark`` fixture of tests/conftest.py.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

T = TypeVar("T")
SEGMENT_ENTRIES = 50  # entries per segment: a few hundred messages span several segments
SERVER_ARGS = [
    "--segment-max-entries",
    str(SEGMENT_ENTRIES),
    "--offload-check-interval",
    "0.2",
    "--retention-check-interval",
    "0.2",
    # Offloaded segments lose their local copy at the next sweep: reads must go to Parquet.
    "--offload-deletion-lag-ms",
    "0",
]


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    proc = StandaloneProcess(tmp_path_factory.mktemp("spark-standalone"), extra_args=SERVER_ARGS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="package")
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="package")
def admin(server: StandaloneProcess) -> Admin:
    return Admin(server.http_url)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A local topic name (in public/default) no other test uses."""
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name).strip("_")[:40]
    return f"{stem}_{uuid.uuid4().hex[:8]}"


class Admin:
    """A urllib JSON client for the admin REST API and the /magnetar/v1 endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            with e:
                pytest.fail(f"{method} {path}: HTTP {e.code} {e.read()!r}")
        return json.loads(raw) if raw else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def plan(self, topic: str, namespace: str = "public/default") -> dict[str, Any]:
        plan: dict[str, Any] = self.get(f"/magnetar/v1/topics/{namespace}/{topic}/plan")
        return plan

    def partition(self, topic: str, index: int = 0) -> dict[str, Any]:
        part: dict[str, Any] = self.plan(topic)["partitions"][index]
        return part

    def backlog(self, topic: str, sub: str) -> int:
        stats = self.get(f"/admin/v2/persistent/public/default/{topic}/stats")
        return int(stats["subscriptions"][sub]["msgBacklog"])


def wait_until(probe: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """Poll ``probe`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)  # polling pace, not synchronisation: the probe decides


def produce(client: pulsar.Client, topic: str, values: list[bytes], *, per_entry: int = 1) -> None:
    """Send ``values`` to ``topic`` (a full name or local in public/default), ``per_entry``
    messages per stored entry (a client-side batch); durable when this returns."""
    name = topic if "://" in topic else f"persistent://public/default/{topic}"
    producer = client.create_producer(
        name,
        batching_enabled=per_entry > 1,
        batching_max_messages=max(per_entry, 2),
        batching_max_publish_delay_ms=60_000,  # batches close on size or flush, never time
    )
    try:
        for i in range(0, len(values), per_entry):
            for value in values[i : i + per_entry]:
                producer.send_async(value, None)
            producer.flush()
    finally:
        producer.close()


def offload(admin: Admin, topic: str, index: int | None = None) -> None:
    """Offload every closed segment of ``topic`` (public/default; partition ``index`` of a
    partitioned topic) and wait until each one is read from the object store only."""
    name = topic if index is None else f"{topic}-partition-{index}"
    path = f"/admin/v2/persistent/public/default/{name}/offload"
    admin.call("PUT", path)
    wait_until(lambda: admin.get(path)["status"] == "SUCCESS", f"offload of {name}")

    def dropped() -> bool:
        closed = [s for s in admin.partition(topic, index or 0)["segments"] if s["state"] != "OPEN"]
        return bool(closed) and all(s["state"] == "OFFLOADED" and not s["local"] for s in closed)

    wait_until(dropped, f"local copies of {name} dropped")


def wait_clock_past(ms: int) -> None:
    """Return once the wall clock has passed ``ms`` (epoch ms): publish times after this
    call are strictly greater than ``ms``."""
    wait_until(lambda: time.time() * 1000 > ms + 1, "the clock to move on", timeout=5)
