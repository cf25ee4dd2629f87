"""The namespace `persistence` policy chooses E/Qw/Qa of new ledgers; closed replicated
ledgers offload to the object store and are read back from it after their copies on the
storage nodes are dropped."""

from __future__ import annotations

import pulsar
import pytest
import requests

from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import read_all

pytestmark = pytest.mark.slow
NS = "/admin/v2/namespaces/public/default"


def test_the_namespace_persistence_policy_sets_the_quorums_of_new_ledgers(
    cluster: Cluster,
) -> None:
    for _ in range(3):
        cluster.add_node()
    b = cluster.add_broker()  # settings: 2/2/2
    bad = requests.post(
        f"{b.http_url}{NS}/persistence",
        json={"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2},
    )
    assert bad.status_code == 400 and "bookkeeperEnsemble >=" in bad.json()["reason"]
    policy = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    assert requests.post(f"{b.http_url}{NS}/persistence", json=policy).status_code == 204
    assert requests.get(f"{b.http_url}{NS}/persistence").json() == policy
    client = pulsar.Client(b.pulsar_url)
    client.create_producer("persistent://public/default/three").send(b"x")
    client.close()
    ledger = cluster.ledgers("persistent://public/default/three")[-1]
    assert ledger["quorum"] == [3, 3, 2]
    assert len(ledger["ensembles"][0][1]) == 3


def test_closed_replicated_ledgers_offload_and_read_back_from_the_object_store(
    cluster: Cluster,
) -> None:
    for _ in range(3):
        cluster.add_node()
    b = cluster.add_broker("--segment-max-bytes", "20000", "--offload-deletion-lag-ms", "0")
    topic = "persistent://public/default/archive"
    client = pulsar.Client(b.pulsar_url)
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    sent = [f"a-{i:05d}".encode() for i in range(3000)]
    for value in sent:
        producer.send_async(value, None)
    producer.flush()
    client.close()
    path = f"{b.http_url}/admin/v2/persistent/public/default/archive/offload"
    assert requests.put(path, params={"messageId": "latest"}).status_code == 202

    def offloaded() -> bool:
        ledgers = cluster.ledgers(topic)
        done = [lg for lg in ledgers if lg["info"]["state"] == "OFFLOADED"]
        return len(done) >= 2 and all(not lg["info"]["local"] for lg in done)

    wait_for(offloaded, 90, "closed ledgers offloaded and their node copies dropped")
    assert read_all(b.pulsar_url, topic, len(sent)) == sent
