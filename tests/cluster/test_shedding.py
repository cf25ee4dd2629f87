"""Load shedding: every bundle starts on one broker; a second broker joins; the leader
broker unloads bundles from the loaded one until the two hold two each, while producers on
every bundle keep publishing — nothing acknowledged lost, nothing stored twice, no publish
failed; then shedding stops (no bundle moves back and forth)."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests

from magnetar.broker.ownership import equal_boundaries, range_name
from magnetar.testing.cluster import topic_where
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import check_history, read_all

pytestmark = pytest.mark.slow
SHED = ["--load-balancer-shedding-interval-s", "1", "--load-balancer-shedding-grace-s", "600"]


class PacedPublisher(threading.Thread):
    """Publishes numbered messages, 20 at a time with a pause, until stopped."""

    def __init__(self, url: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.client = pulsar.Client(url, operation_timeout_seconds=30)
        self.producer = self.client.create_producer(topic, send_timeout_millis=30_000)
        self.acked: set[bytes] = set()
        self.failed: list[Any] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            for _ in range(20):
                value = f"m-{i:07d}".encode()
                self.producer.send_async(value, self._done(value))
                i += 1
            self.producer.flush()
            self.stop_flag.wait(0.05)

    def _done(self, value: bytes) -> Any:
        def done(result: pulsar.Result, _mid: Any) -> None:
            if result == pulsar.Result.Ok:
                self.acked.add(value)
            else:
                self.failed.append((value, result))

        return done


def _owners(http: str) -> dict[str, str | None]:
    answer = requests.get(f"{http}/admin/v2/namespaces/public/default/bundles", timeout=10)
    answer.raise_for_status()
    owners: dict[str, str | None] = answer.json()["bundles"]
    return owners


def test_shedding_spreads_bundles_over_a_broker_that_joined_later(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    url = zookeeper.url(f"/shed-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    publishers: list[PacedPublisher] = []
    try:
        for _ in range(2):
            cluster.add_node()
        a = cluster.add_broker(*SHED)
        bounds = equal_boundaries()
        bundles = [range_name(lo, hi) for lo, hi in itertools.pairwise(bounds)]
        topics = [
            f"persistent://public/default/{topic_where(f'shed{i}', lambda b, w=want: b == w)}"
            for i, want in enumerate(bundles)
        ]
        for topic in topics:  # a alone: it takes every bundle
            publishers.append(PacedPublisher(a.pulsar_url, topic))
        assert set(_owners(a.http_url).values()) == {f"127.0.0.1:{a.pulsar_port}"}
        b = cluster.add_broker(*SHED)
        for p in publishers:
            p.start()

        def balanced() -> Counter[str | None] | None:
            held = Counter(_owners(b.http_url).values())
            return held if sorted(held.values()) == [2, 2] and None not in held else None

        wait_for(balanced, 90, "two bundles on each broker")
        moves = sum("load shedding: unloading bundle" in line for s in (a, b) for line in s.output)
        assert moves == 2
        settled = _owners(b.http_url)
        time.sleep(4)  # four more rounds: balanced, nothing moves
        assert _owners(b.http_url) == settled
        for p in publishers:
            p.stop_flag.set()
            p.join(30)
            p.producer.flush()
        for p, topic in zip(publishers, topics, strict=True):
            assert not p.failed, f"{topic}: publishes failed: {p.failed[:3]}"
            check_history(read_all(b.pulsar_url, topic, len(p.acked)), p.acked)
    finally:
        for p in publishers:
            p.client.close()
        cluster.stop()
