"""`magnetar cluster up` starts ZooKeeper, storage nodes and a broker in the background; the
clients use it; `magnetar cluster down` stops every process it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import REPO, free_port

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "magnetar.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=REPO, timeout=180)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_cluster_up_serves_clients_and_down_stops_everything(tmp_path: Path) -> None:
    ports = {p: str(free_port()) for p in ("zk", "pulsar", "http", "kafka", "flight")}
    first_node = free_port()
    up = _run(
        "cluster", "up", "--data-dir", str(tmp_path), "--storage-nodes", "2",
        "--zookeeper-port", ports["zk"], "--storage-port", str(first_node),
        "--pulsar-port", ports["pulsar"], "--http-port", ports["http"],
        "--kafka-port", ports["kafka"], "--flight-port", ports["flight"],
    )  # fmt: skip
    state = json.loads((tmp_path / "cluster.json").read_text())
    pids = [state["zookeeper"]["pid"]] + [p["pid"] for p in state["nodes"] + state["brokers"]]
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"service URL pulsar://127.0.0.1:{ports['pulsar']}" in up.stdout
        assert all(_alive(pid) for pid in pids)
        client = pulsar.Client(f"pulsar://127.0.0.1:{ports['pulsar']}")
        producer = client.create_producer("hello")
        reader = client.create_reader("hello", pulsar.MessageId.earliest)
        for i in range(10):
            producer.send(f"m{i}".encode())
        assert [reader.read_next(10_000).data() for _ in range(10)] == [
            f"m{i}".encode() for i in range(10)
        ]
        client.close()
        listing = _run(
            "admin", "--url", f"http://127.0.0.1:{ports['http']}", "storage-nodes", "list"
        )
        assert listing.returncode == 0 and listing.stdout.count("read-write") == 2, listing
        again = _run("cluster", "up", "--data-dir", str(tmp_path))
        assert again.returncode != 0 and "already runs" in again.stderr
        status = _run("cluster", "status", "--data-dir", str(tmp_path))
        assert status.stdout.count("running") == 4, status.stdout
    finally:
        down = _run("cluster", "down", "--data-dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert not any(_alive(pid) for pid in pids)
    assert not (tmp_path / "cluster.json").exists()


def test_an_impossible_cluster_is_refused_with_the_reason(tmp_path: Path) -> None:
    out = _run("cluster", "up", "--data-dir", str(tmp_path), "--storage-nodes", "1")
    assert out.returncode != 0 and "at least --ensemble-size (2) storage nodes" in out.stderr
