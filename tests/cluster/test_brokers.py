"""Several brokers on one ZooKeeper and one set of storage nodes: a topic is served by the
broker owning its bundle; when that broker dies, another takes the bundle, recovers the
topic's ledger and serves it, with nothing acknowledged lost and nothing duplicated."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import requests

from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import Publisher, check_history, read_all

pytestmark = pytest.mark.slow
TOPIC = "persistent://public/default/failover"


@pytest.fixture
def two_brokers(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Cluster:
    url = zookeeper.url(f"/brokers-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    for _ in range(3):
        cluster.add_node()
    cluster.add_broker()
    cluster.add_broker()
    return cluster


def _owner(http_url: str, topic: str) -> str:
    path = topic.removeprefix("persistent://")
    return str(requests.get(f"{http_url}/lookup/v2/topic/persistent/{path}").json()["brokerUrl"])


def test_one_owner_per_topic_and_failover_loses_nothing(two_brokers: Cluster) -> None:
    cluster = two_brokers
    try:
        first, second = cluster.brokers
        listed = requests.get(f"{first.http_url}/admin/v2/brokers").json()
        assert len(listed) == 2
        assert (
            requests.post(
                f"{first.http_url}/admin/v2/namespaces/public/default/deduplication", json=True
            ).status_code
            == 204
        )
        service = f"{first.pulsar_url},{second.pulsar_url}".replace(",pulsar://", ",")
        pub = Publisher(service, TOPIC).start()
        wait_for(lambda: len(pub.acked) >= 2000, 60, "2000 acknowledged messages")
        owner_url = _owner(first.http_url, TOPIC)
        assert owner_url == _owner(second.http_url, TOPIC), "two brokers disagree on the owner"
        owner = first if owner_url == first.pulsar_url else second
        survivor = second if owner is first else first
        owner.kill()
        killed_at, first_after = time.monotonic(), pub.sent + 1000  # beyond any queued send
        wait_for(lambda: pub.acked_from(first_after), 60, "publishing to resume elsewhere")
        failover = time.monotonic() - killed_at
        before = len(pub.acked)
        wait_for(lambda: len(pub.acked) >= before + 2000, 60, "publishes on the new owner")
        pub.stop()
        assert _owner(survivor.http_url, TOPIC) == survivor.pulsar_url
        got = read_all(survivor.pulsar_url, TOPIC, len(pub.acked))
        check_history(got, pub.acked)
        pub.close()
        print(f"failover: first acknowledged publish on the new owner {failover:.1f} s after kill")
    finally:
        cluster.stop()
