"""Pulsar's admin v2 spellings of the stats paths, as its admin clients call them:
``internalStats`` (Magnetar's older ``internal-stats`` stays as an alias), ``partitioned-stats``
and ``partitioned-internalStats`` (summed and per partition), ``lastMessageId``."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, unique

BASE = "/admin/v2/persistent/public/default"


@pytest.fixture
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


def _produce(client: pulsar.Client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"m-{i}".encode())
    producer.close()


@pytest.mark.parametrize("spelling", ["internalStats", "internal-stats"])
def test_internal_stats(admin: AdminHttp, client: pulsar.Client, spelling: str) -> None:
    local = unique("internal")
    topic = f"persistent://public/default/{local}"
    client.subscribe(topic, "sub").close()
    _produce(client, topic, 3)
    stats = admin.get(f"{BASE}/{local}/{spelling}")
    assert stats["numberOfEntries"] == 3
    assert "sub" in stats["cursors"]


def test_last_message_id(admin: AdminHttp, client: pulsar.Client) -> None:
    local = unique("last")
    _produce(client, f"persistent://public/default/{local}", 2)
    assert admin.get(f"{BASE}/{local}/lastMessageId")["entryId"] >= 1


def test_partitioned_stats_sum_the_partitions(admin: AdminHttp, client: pulsar.Client) -> None:
    local = unique("parted")
    admin.ok("PUT", f"{BASE}/{local}/partitions", 3)
    topic = f"persistent://public/default/{local}"
    client.subscribe(topic, "sub").close()
    _produce(client, topic, 9)

    stats = admin.get(f"{BASE}/{local}/partitioned-stats")
    assert stats["metadata"] == {"partitions": 3}
    assert stats["msgInCounter"] == 9
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 9
    assert sorted(stats["partitions"]) == [f"{topic}-partition-{i}" for i in range(3)]
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 9

    brief = admin.get(f"{BASE}/{local}/partitioned-stats?perPartition=false")
    assert "partitions" not in brief and brief["msgInCounter"] == 9

    internal = admin.get(f"{BASE}/{local}/partitioned-internalStats")
    assert internal["metadata"] == {"partitions": 3}
    assert sum(p["numberOfEntries"] for p in internal["partitions"].values()) == 9


@pytest.mark.parametrize("path", ["partitioned-stats", "partitioned-internalStats"])
def test_partitioned_paths_refuse_a_plain_topic(
    admin: AdminHttp, client: pulsar.Client, path: str
) -> None:
    local = unique("plain")
    _produce(client, f"persistent://public/default/{local}", 1)
    assert admin.refused("GET", f"{BASE}/{local}/{path}").status == 404
