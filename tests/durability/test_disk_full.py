"""A full disk (issue 21, item 9): logged once per episode with the free space, shown in
/metrics, Kafka producers get an answer in bounded time, and writes resume once space is
back. The data directory is a small tmpfs filled with a ballast file.

Kafka's answer stays KAFKA_STORAGE_ERROR, what Kafka itself answers for a failed log
directory: it is retriable, so clients retry until their delivery timeout (librdkafka's
message.timeout.ms, the Java client's delivery.timeout.ms) and then report the message
failed; nothing of it was stored, so a retry after space returns is stored once. A Pulsar
producer is answered PersistenceError (DiskFullError is retriable), on which its client
reconnects and resends until its send timeout.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.fail(  # not a skip: the suite runs as root (make test in CI), as the netns tests
            f"cannot mount a tmpfs for the disk-full test: {done.stderr!r}; run make test as "
            "root, as CI does"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:  # unbuffered: no write left over for the close to fail on
        while True:
            os.write(fd, b"\0" * (1 << 16))
    except OSError:
        pass
    finally:
        os.close(fd)
    return ballast


def _metric(server: StandaloneProcess, name: str) -> float:
    body = urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30).read().decode()
    [line] = [x for x in body.splitlines() if x.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


def _produce(bootstrap: str, n: int) -> list[object]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "linger.ms": 0}
    )
    results: list[object] = []
    for _ in range(n):
        producer.produce("full", b"x" * 10_000, on_delivery=lambda e, _m: results.append(e))
        producer.flush(30)
    return results


def test_disk_full_is_logged_once_measured_answered_and_recovers(small_disk: Path) -> None:
    with StandaloneProcess(small_disk / "data") as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        assert _produce(bootstrap, 1) == [None]
        ballast = _fill(small_disk)
        failed = _produce(bootstrap, 3)  # each answered in bounded time, none stored
        assert len(failed) == 3 and all(e is not None for e in failed), failed
        assert _metric(server, "magnetar_storage_disk_full") == 1
        assert _metric(server, "magnetar_storage_disk_full_episodes_total") == 1
        full = [line for line in server.output if "disk full" in line]
        assert len(full) == 1, full  # once per episode, however many appends failed
        assert "MiB free" in full[0] and str(small_disk) in full[0]

        ballast.unlink()
        assert _produce(bootstrap, 2) == [None, None]
        assert _metric(server, "magnetar_storage_disk_full") == 0
        assert len([x for x in server.output if "disk space is back" in x]) == 1


def test_producers_of_both_protocols_retry_through_a_full_disk(small_disk: Path) -> None:
    with StandaloneProcess(small_disk / "data") as server:
        client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer(
                "retry-pulsar", send_timeout_millis=120_000, batching_enabled=False
            )
            producer.send(b"before")
            kafka = confluent_kafka.Producer(
                {
                    "bootstrap.servers": f"127.0.0.1:{server.kafka_port}",
                    "linger.ms": 0,
                    "message.timeout.ms": 120_000,
                }
            )
            kafka.produce("retry-kafka", b"before")  # the topic exists before the disk fills
            assert kafka.flush(30) == 0
            ballast = _fill(small_disk)
            sent: list[object] = []
            delivered: list[object] = []
            producer.send_async(b"x" * 10_000, lambda result, _id: sent.append(result))
            kafka.produce(
                "retry-kafka", b"y" * 10_000, on_delivery=lambda e, _m: delivered.append(e)
            )

            def refused() -> bool:
                kafka.poll(0.1)
                return _metric(server, "magnetar_storage_disk_full") == 1

            wait_until(refused, "an append refused for want of disk", timeout=60)
            assert sent == [] and delivered == []  # both clients are still retrying
            ballast.unlink()
            producer.flush()
            kafka.flush(60)
            assert sent == [pulsar.Result.Ok] and delivered == [None]
            reader = client.create_reader("retry-pulsar", pulsar.MessageId.earliest)
            got = [reader.read_next(10_000).data() for _ in range(2)]
            assert got == [b"before", b"x" * 10_000] and not reader.has_message_available()
        finally:
            client.close()
