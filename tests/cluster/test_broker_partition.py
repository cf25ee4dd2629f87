"""A broker cut off from ZooKeeper but not from its clients or the storage nodes (issue 15):
it runs in a network namespace of its own, joined to this one by two links made by the
test — one that clients and storage nodes use, one that leads only to ZooKeeper — and the
test takes the ZooKeeper link down. The broker must stop serving once its session is lost,
the other broker takes the topic when the session expires, nothing acknowledged is lost or
stored twice, and after the heal the cut-off broker serves again."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from magnetar.testing.cluster import StorageNodeProcess, broker
from magnetar.testing.server import StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import Publisher, check_history, read_all

pytestmark = pytest.mark.slow
TOPIC = "persistent://public/default/cut-from-zookeeper"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Link:
    host_if: str
    host: str  # this namespace's address on the link
    inside: str  # the namespace's address on it


@pytest.fixture
def two_links() -> Iterator[tuple[str, Link, Link]]:
    """A network namespace with two veth links to this one: (name, service link, ZooKeeper
    link), each a private /30 of its own."""
    tag = uuid.uuid4().hex[:6]
    name = f"mgb{tag}"
    octet = int(tag[:2], 16) % 250 + 1
    links = [
        Link(f"vs{tag}", f"10.216.{octet}.1", f"10.216.{octet}.2"),
        Link(f"vz{tag}", f"10.217.{octet}.1", f"10.217.{octet}.2"),
    ]
    _ip("netns", "add", name)
    try:
        for link, peer in zip(links, (f"ps{tag}", f"pz{tag}"), strict=True):
            _ip("link", "add", link.host_if, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", name)
            _ip("addr", "add", f"{link.host}/30", "dev", link.host_if)
            _ip("link", "set", link.host_if, "up")
            _ip("netns", "exec", name, "ip", "addr", "add", f"{link.inside}/30", "dev", peer)
            _ip("netns", "exec", name, "ip", "link", "set", peer, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name, links[0], links[1]
    finally:
        for link in links:
            subprocess.run(["ip", "link", "del", link.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@dataclass
class NamespacedBroker(StandaloneProcess):
    """``magnetar broker`` inside a network namespace, bound to ``address`` there."""

    netns: str = ""
    address: str = "127.0.0.1"
    role: str = "broker"

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://{self.address}:{self.pulsar_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.address}:{self.http_port}"

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--bind-address") + 1] = self.address
        return ["ip", "netns", "exec", self.netns, *cmd]


def _owner(http_url: str) -> str:
    path = TOPIC.removeprefix("persistent://")
    answer = requests.get(f"{http_url}/lookup/v2/topic/persistent/{path}", timeout=30)
    return str(answer.json()["brokerUrl"])


def test_a_broker_cut_off_from_zookeeper_hands_over_and_acknowledges_nothing_alone(
    two_links: tuple[str, Link, Link], tmp_path: Path
) -> None:
    name, service, zk_link = two_links
    zk = ZooKeeperProcess(tmp_path / "zk", listen="0.0.0.0").start()
    chroot = f"/zkcut-{uuid.uuid4().hex[:8]}"
    session = "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, zk.url(chroot) + session)
    try:
        for i in range(3):  # on the service link's host address: reachable from both sides
            node = StorageNodeProcess(
                tmp_path / f"node{i}", metadata_url=cluster.url, address=service.host
            )
            cluster.nodes.append(node.start())
        cut_off = NamespacedBroker(
            tmp_path / "cut-off",
            ["--metadata-url", f"zk://{zk_link.host}:{zk.port}{chroot}{session}"],
            netns=name,
            address=service.inside,
        ).start()
        cluster.brokers.append(cut_off)
        other = broker(tmp_path / "other", cluster.url).start()
        cluster.brokers.append(other)
        dedup = f"{other.http_url}/admin/v2/namespaces/public/default/deduplication"
        assert requests.post(dedup, json=True).status_code == 204
        assert _owner(cut_off.http_url) == cut_off.pulsar_url  # asked first, it takes the topic
        port = other.pulsar_url.rsplit(":", 1)[1]
        pub = Publisher(f"{cut_off.pulsar_url},127.0.0.1:{port}", TOPIC).start()
        wait_for(lambda: len(pub.acked) >= 1000, 60, "1000 acknowledged messages")

        _ip("link", "set", zk_link.host_if, "down")  # ZooKeeper only: clients still reach it
        # it owns the topic until its session ends (writes need no ZooKeeper); then it stops
        wait_for(
            lambda: any("lost its ZooKeeper session" in line for line in cut_off.output),
            30,
            "the cut-off broker to notice its session is lost",
        )
        wait_for(
            lambda: _owner(other.http_url) == other.pulsar_url, 60, "the other broker to take over"
        )
        first_after = pub.sent + 1000
        wait_for(lambda: pub.acked_from(first_after), 90, "publishing to resume on the other")
        # the cut-off broker is still up and reachable by clients all along
        socket.create_connection((service.inside, cut_off.pulsar_port), timeout=5).close()

        _ip("link", "set", zk_link.host_if, "up")  # healed: it registers again
        wait_for(
            lambda: len(requests.get(f"{other.http_url}/admin/v2/brokers").json()) == 2,
            60,
            "the healed broker to register again",
        )
        before = len(pub.acked)
        wait_for(lambda: len(pub.acked) >= before + 1000, 60, "publishes after the heal")
        pub.stop()
        check_history(read_all(other.pulsar_url, TOPIC, len(pub.acked)), pub.acked)
        pub.close()
    finally:
        cluster.stop()
        zk.stop()
