"""The elected auditor: a topic no broker serves, whose closed ledger lost a storage node,
is loaded by the cluster's leader broker and copied back to its write quorum — without any
client asking for it. Then a second original node dies and every message still reads."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests

from magnetar.broker.ownership import bundle_of
from magnetar.core.names import TopicName
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import read_all

pytestmark = pytest.mark.slow
TOPIC = "persistent://public/default/orphan"
FAST = ["--rereplication-grace-s", "2"]


def test_an_unserved_topic_is_re_replicated_by_the_elected_auditor(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    url = zookeeper.url(f"/orphan-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    try:
        nodes = [cluster.add_node() for _ in range(3)]
        a = cluster.add_broker(*FAST)
        cluster.add_broker(*FAST)
        client = pulsar.Client(a.pulsar_url)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sent = [f"m-{i:05d}".encode() for i in range(300)]
        for value in sent:
            producer.send(value)
        client.close()
        owners = requests.get(f"{a.http_url}/admin/v2/namespaces/public/default/bundles").json()
        bundle = bundle_of(TopicName.parse(TOPIC))
        owner = next(
            b for b in cluster.brokers if owners["bundles"][bundle].endswith(f":{b.pulsar_port}")
        )
        unload = f"{owner.http_url}/admin/v2/namespaces/public/default/{bundle}/unload"
        requests.put(unload, timeout=30).raise_for_status()  # served by nobody now
        [ledger] = [lg for lg in cluster.ledgers(TOPIC) if lg["lastEntry"] >= 0]
        assert ledger["info"]["state"] == "CLOSED"
        ledger_id = ledger["info"]["segment_id"]
        first = {n for _, ns in ledger["ensembles"] for n in ns}
        victim = next(n for n in nodes if n.node_id in first)
        victim.kill()  # kill -9: its copy of the ledger is gone for good

        def copied_back() -> dict[str, Any] | None:
            again = next(
                lg for lg in cluster.ledgers(TOPIC) if lg["info"]["segment_id"] == ledger_id
            )
            named = {n for _, ns in again["ensembles"] for n in ns}
            return again if victim.node_id not in named and len(named) == 2 else None

        wait_for(copied_back, 60, "the auditor copies the ledger to the third node")
        log = "".join(line for b in cluster.brokers for line in b.output)
        assert "no broker serves it; loading it here" in log
        second = next(n for n in nodes if n.node_id in first and n is not victim)
        second.kill()  # the other original copy too: only the auditor's copy is left
        assert read_all(a.pulsar_url, TOPIC, len(sent))[: len(sent)] == sent
    finally:
        cluster.stop()
