"""A cluster on loopback for tests and benchmarks: storage-node processes and broker
processes sharing one ZooKeeper, each on free ports of its own."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.testing.server import StandaloneProcess, free_port


@dataclass
class StorageNodeProcess(StandaloneProcess):
    """``magnetar storage-node`` in a child process (``metadata_url``: the cluster's ZK)."""

    metadata_url: str = ""
    storage_port: int = field(default_factory=free_port)
    role: str = "storage-node"
    address: str = "127.0.0.1"
    netns: str = ""  # run inside this network namespace (`ip netns exec`)

    @property
    def node_id(self) -> str:
        return f"{self.address}:{self.storage_port}"

    def command(self) -> list[str]:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [
            *prefix,
            sys.executable,
            "-m",
            "magnetar.cli",
            "storage-node",
            "--data-dir",
            str(self.data_dir),
            "--bind-address",
            self.address,
            "--port",
            str(self.storage_port),
            "--metadata-url",
            self.metadata_url,
            "--flight-port",
            str(self.flight_port),
            *self.extra_args,
        ]


def broker(data_dir: Path, metadata_url: str, *quorum_args: str) -> StandaloneProcess:
    """A ``magnetar broker`` writing to the storage nodes registered at ``metadata_url``."""
    return StandaloneProcess(
        data_dir, ["--metadata-url", metadata_url, *quorum_args], role="broker"
    )


def topic_where(prefix: str, fits: Callable[[str], bool], namespace: str = "public/default") -> str:
    """The first local name ``<prefix>-<i>`` of ``namespace`` whose bundle (the default four)
    ``fits`` — to place a test's topics beside, or apart from, others."""
    from magnetar.broker.ownership import bundle_of
    from magnetar.core.names import TopicName

    return next(
        f"{prefix}-{i}"
        for i in range(10_000)
        if fits(bundle_of(TopicName.parse(f"persistent://{namespace}/{prefix}-{i}")))
    )
