"""ListOffsets v8–v10: −4 (earliest local, KIP-405) is the first offset whose segment still
has its local copy, the earliest offset while none was dropped; −5 (latest tiered, KIP-1005)
is the last offloaded offset, −1 when nothing is offloaded. A special timestamp below its
version, or an unknown negative one, is UNSUPPORTED_VERSION (35) as in Kafka. Serving v10
lets kafka-python's version probe infer Kafka 4.0."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import RawKafka, make_batch, offloading_server

from kafka.protocol.consumer import ListOffsetsRequest  # isort: skip

EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -3, -4, -5
UNSUPPORTED_VERSION = 35
NEW_VERSIONS = (8, 9, 10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from offloading_server(tmp_path_factory, "kafka-list-offsets-tiers")


@pytest.fixture
def conn(server: StandaloneProcess) -> Iterator[RawKafka]:
    raw = RawKafka(server.kafka_port)
    try:
        yield raw
    finally:
        raw.close()


def _http(server: StandaloneProcess, method: str, path: str, body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.http_url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def _wait(probe: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _list(conn: RawKafka, topic: str, timestamp: int, version: int) -> tuple[int, int, int]:
    """(error code, offset, timestamp) of partition 0."""
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=timestamp
    )
    topics = [ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])]
    fields: dict[str, Any] = {"replica_id": -1, "isolation_level": 0, "topics": topics}
    if version >= 10:
        fields["timeout_ms"] = 5_000
    found = conn.request(ListOffsetsRequest[version](**fields)).topics[0].partitions[0]
    return found.error_code, found.offset, found.timestamp


def _fill(conn: RawKafka, topic: str, entries: int) -> None:
    for i in range(entries):  # one record per entry: offsets and entries line up
        assert conn.produce(topic, make_batch(1)) == (0, i)


def test_without_offload_earliest_local_is_earliest_and_nothing_is_tiered(
    conn: RawKafka, topic: str
) -> None:
    _fill(conn, topic, 6)
    for version in NEW_VERSIONS:
        assert _list(conn, topic, EARLIEST_LOCAL, version) == (0, 0, -1)
        if version >= 9:
            assert _list(conn, topic, LATEST_TIERED, version) == (0, -1, -1)
        # −3 still answers at the new versions: all records share a timestamp, the first wins
        assert _list(conn, topic, MAX_TIMESTAMP, version)[:2] == (0, 0)


def test_offloaded_segments_move_latest_tiered_then_earliest_local(
    server: StandaloneProcess, conn: RawKafka, topic: str
) -> None:
    _fill(conn, topic, 10)  # segments of 4 entries: at least [0, 3] and [4, 7] closed
    base = f"/admin/v2/persistent/public/default/{topic}"
    _http(server, "PUT", base + "/offload")
    _wait(lambda: _http(server, "GET", base + "/offload")["status"] == "SUCCESS", "offload")

    def ledgers() -> list[dict[str, Any]]:
        return list(_http(server, "GET", base + "/internal-stats")["ledgers"])

    offloaded = [s for s in ledgers() if s["offloaded"]]
    assert offloaded and all(s["local"] for s in offloaded)  # 4 h deletion lag by default
    last_tiered = max(s["lastOffset"] for s in offloaded)
    assert last_tiered >= 7
    for version in (9, 10):
        assert _list(conn, topic, LATEST_TIERED, version) == (0, last_tiered, -1)
    for version in NEW_VERSIONS:  # offloaded but still local: the local log starts at 0
        assert _list(conn, topic, EARLIEST_LOCAL, version) == (0, 0, -1)

    _http(server, "POST", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 0)
    _wait(lambda: all(not s["local"] for s in ledgers() if s["offloaded"]), "local copies to go")
    for version in NEW_VERSIONS:
        assert _list(conn, topic, EARLIEST_LOCAL, version) == (0, last_tiered + 1, -1)
        assert _list(conn, topic, EARLIEST, version)[:2] == (0, 0)  # still readable: tiered
    assert _list(conn, topic, LATEST_TIERED, 10) == (0, last_tiered, -1)


@pytest.mark.parametrize(
    ("timestamp", "version"),
    [(MAX_TIMESTAMP, 6), (EARLIEST_LOCAL, 7), (LATEST_TIERED, 8), (-6, 10), (-42, 10)],
)
def test_special_timestamp_below_its_version_or_unknown_is_unsupported_version(
    conn: RawKafka, topic: str, timestamp: int, version: int
) -> None:
    _fill(conn, topic, 2)
    assert _list(conn, topic, timestamp, version) == (UNSUPPORTED_VERSION, -1, -1)
    assert _list(conn, topic, EARLIEST, version) == (0, 0, -1)  # the partition is fine


def test_kafka_python_probe_infers_kafka_4_0(
    server: StandaloneProcess, conn: RawKafka, topic: str
) -> None:
    _fill(conn, topic, 3)
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.kafka_port}", api_version=None)
    try:
        assert consumer.config["api_version"] == (4, 0)
        tp = TopicPartition(topic, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}  # ListOffsets at the probed v10
        assert consumer.end_offsets([tp]) == {tp: 3}
    finally:
        consumer.close()
