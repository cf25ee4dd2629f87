"""ZooKeeper killed and restarted under load: storage nodes and the broker reconnect (their
sessions survive a short outage), publishes go on, nothing acknowledged is lost."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import TOPIC, Publisher, check_history, read_all

pytestmark = pytest.mark.slow


def test_zookeeper_killed_and_restarted_under_load_loses_nothing(tmp_path: Path) -> None:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    cluster = Cluster(tmp_path, zk.url(f"/zk-restart-{uuid.uuid4().hex[:8]}"))
    try:
        for _ in range(3):
            cluster.add_node()
        b = cluster.add_broker("--segment-max-bytes", "200000")
        pub = Publisher(b.pulsar_url, TOPIC).start()
        wait_for(lambda: len(pub.acked) >= 1000, 60, "1000 acknowledged messages")
        zk.kill()  # kill -9: no clean shutdown of the metadata store
        before = len(pub.acked)
        wait_for(lambda: len(pub.acked) >= before + 500, 60, "adds going on without ZooKeeper")
        zk.start()  # same port, same data directory
        before = len(pub.acked)
        wait_for(lambda: len(pub.acked) >= before + 3000, 90, "publishes (and rollovers) after")
        pub.stop()
        assert len(cluster.ledgers(TOPIC)) >= 2, "no rollover: the metadata writes were not tried"
        check_history(read_all(b.pulsar_url, TOPIC, len(pub.acked)), pub.acked)
        pub.close()
        nodes = {n["node_id"] for n in _listing(b.http_url)}
        assert nodes == {n.node_id for n in cluster.nodes}, "a node did not register again"
    finally:
        cluster.stop()
        zk.stop()


def _listing(http_url: str) -> list[dict[str, object]]:
    import requests

    return list(requests.get(f"{http_url}/admin/v2/storage-nodes").json())
