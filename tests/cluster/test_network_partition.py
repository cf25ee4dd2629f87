"""A storage node cut off the network (its own network namespace, the link taken down by
the test) during writes, then healed: nothing acknowledged lost, nothing twice, one order."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.testing.cluster import StorageNodeProcess, broker
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import TOPIC, Publisher, check_history, read_all

pytestmark = pytest.mark.slow


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def netns() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair: (name, host address, its
    address). Made and removed by the test; addresses from a private /30."""
    tag = uuid.uuid4().hex[:6]
    name, host_if, ns_if = f"mgn{tag}", f"vh{tag}", f"vn{tag}"
    octet = int(tag[:2], 16) % 250 + 1
    host, inside = f"10.213.{octet}.1", f"10.213.{octet}.2"
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{host}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{inside}/30", "dev", ns_if)
        _ip("netns", "exec", name, "ip", "link", "set", ns_if, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name, host_if, inside
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_a_node_cut_off_and_healed_loses_nothing(
    netns: tuple[str, str, str], tmp_path: Path
) -> None:
    name, host_if, inside = netns
    zk = ZooKeeperProcess(tmp_path / "zk", listen="0.0.0.0").start()
    chroot = f"/cut-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(tmp_path, zk.url(chroot))
    try:
        host_ip = _host_address(host_if)
        cut_off = StorageNodeProcess(
            tmp_path / "netns-node",
            metadata_url=f"zk://{host_ip}:{zk.port}{chroot}",
            address=inside,
            netns=name,
        ).start()
        cluster.nodes.append(cut_off)
        cluster.add_node()
        b = broker(tmp_path / "broker", cluster.url, "--add-timeout-ms", "1500").start()
        cluster.brokers.append(b)
        pub = Publisher(b.pulsar_url, TOPIC).start()
        wait_for(lambda: len(pub.acked) >= 1000, 60, "1000 acknowledged messages")
        assert cut_off.node_id in cluster.ledgers(TOPIC)[-1]["ensembles"][-1][1]
        spare = cluster.add_node()
        _ip("link", "set", host_if, "down")  # the cut: both directions, ZooKeeper too
        before = len(pub.acked)
        wait_for(lambda: len(pub.acked) >= before + 2000, 60, "publishes going on around it")
        assert spare.node_id in cluster.ledgers(TOPIC)[-1]["ensembles"][-1][1]
        _ip("link", "set", host_if, "up")  # healed
        before = len(pub.acked)
        wait_for(lambda: len(pub.acked) >= before + 1000, 60, "publishes after the heal")
        pub.stop()
        assert not pub.failed
        check_history(read_all(b.pulsar_url, TOPIC, len(pub.acked)), pub.acked)
        pub.close()
    finally:
        cluster.stop()
        zk.stop()


def _host_address(interface: str) -> str:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", interface], capture_output=True, text=True
    ).stdout
    return out.split()[3].split("/")[0]
