"""Idle topics do not each hold a file descriptor (issue 21, item 3).

Before: every partition kept its open segment's descriptor for life, so a server whose
open-file limit was 256 failed every topic from about the 230th on (EMFILE, a generic
error to the producer). Now segment files are borrowed from a node-wide LRU capped at half
the limit: 400 topics, each written once, all work, and the server stays under its limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

LIMIT = 256
TOPICS = 400


class LimitedStandalone(StandaloneProcess):
    """A standalone started with soft = hard = LIMIT open files, as under ``ulimit -n``."""

    def command(self) -> list[str]:
        cmd = super().command()
        assert cmd[1:3] == ["-m", "magnetar.cli"]
        limit = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT})); "
            "os.execv(sys.executable, [sys.executable, '-m', 'magnetar.cli', *sys.argv[1:]])"
        )
        return [cmd[0], "-c", limit, *cmd[3:]]


def test_many_idle_topics_within_a_low_open_file_limit(tmp_path: Path) -> None:
    server = LimitedStandalone(tmp_path / "data").start()
    try:
        assert server.proc is not None
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        names = [f"idle-{i}" for i in range(TOPICS)]
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.create_topics(
            [confluent_kafka.admin.NewTopic(n, 1) for n in names], request_timeout=60
        ).values():
            fut.result(60)
        failed: list[str] = []
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        for n in names:
            producer.produce(
                n, n.encode(), on_delivery=lambda err, _m: err and failed.append(str(err))
            )
        assert producer.flush(120) == 0
        assert failed == []
        fds = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
        assert fds < LIMIT, f"{fds} descriptors open"
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False}
        )
        consumer.assign([confluent_kafka.TopicPartition(n, 0, 0) for n in names[::20]])
        got: set[str] = set()
        while len(got) < len(names[::20]):
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None, msg and msg.error()
            got.add(msg.value().decode())
        consumer.close()
        assert got == set(names[::20])
        assert not any("Too many open files" in line for line in server.output)
    finally:
        server.stop()
