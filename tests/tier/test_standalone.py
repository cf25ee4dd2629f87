"""Tiered storage end to end: a real ``magnetar standalone``, the official pulsar-client,
the admin REST API and CLI, and the offloaded objects read with plain pyarrow.parquet."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, unique, wait_until

SEGMENT_ENTRIES = 20
ARGS = [
    "--segment-max-entries",
    str(SEGMENT_ENTRIES),
    "--offload-check-interval",
    "0.2",
    "--retention-check-interval",
    "0.2",
]
RECEIVE_MS = 10_000
# With the default catalog (sqlite) the objects are the topic table's Iceberg data files:
# the same messages, once, under the table's names (docs/iceberg.md)
TABLE_COLUMNS = [
    "__offset",
    "__partition",
    "__publish_time",
    "__event_time",
    "__key",
    "__properties",
    "__producer",
    "__sequence_id",
    "__schema_version",
    "__entry_offset",
    "__batch_size",
    "__entry_format",
    "value",
]


@dataclass(frozen=True)
class Sent:
    data: bytes
    key: str
    properties: dict[str, str]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("tiered"), extra_args=ARGS) as server:
        yield server


@pytest.fixture
def admin(node: StandaloneProcess) -> AdminHttp:
    return AdminHttp(node.http_url)


@pytest.fixture
def client(node: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = connect(node)
    try:
        yield c
    finally:
        c.close()


def connect(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def namespace(admin: AdminHttp, **policies: Any) -> str:
    """A fresh namespace under ``public`` with the given policies (REST path suffix: value)."""
    ns = f"public/{unique('tier')}"
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    for suffix, value in policies.items():
        admin.ok("POST", f"/admin/v2/namespaces/{ns}/{suffix}", value)
    return ns


def message(i: int, kind: str) -> Sent:
    """Binary payloads (every byte value occurs), a key and properties per message."""
    data = f"{kind}-{i}:".encode() + bytes((i * 7 + j) % 256 for j in range(i % 300))
    return Sent(data, f"{kind}-key-{i}", {"i": str(i), "kind": kind})


def produce_singles(client: pulsar.Client, topic: str, first: int, count: int) -> list[Sent]:
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [message(i, "single") for i in range(first, first + count)]
    for m in sent:
        producer.send(m.data, partition_key=m.key, properties=m.properties)
    producer.close()
    return sent


def produce_batches(client: pulsar.Client, topic: str, batches: int, size: int) -> list[Sent]:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=size,
        batching_max_publish_delay_ms=5_000,
    )
    sent = [message(i, "batched") for i in range(batches * size)]
    for m in sent:
        producer.send_async(m.data, None, partition_key=m.key, properties=m.properties)
    producer.flush()
    producer.close()
    return sent


def produce_mixed(client: pulsar.Client, topic: str) -> list[Sent]:
    """50 single messages, 10 batches of 7, one more single: 61 entries, so three segments
    of 20 have closed (each append is acknowledged after the previous roll)."""
    sent = produce_singles(client, topic, 0, 50)
    sent += produce_batches(client, topic, 10, 7)
    return sent + produce_singles(client, topic, 50, 1)


def receive_all(consumer: pulsar.Consumer | pulsar.Reader, n: int) -> list[pulsar.Message]:
    receive = consumer.read_next if isinstance(consumer, pulsar.Reader) else consumer.receive
    got = [receive(RECEIVE_MS) for _ in range(n)]
    with pytest.raises(pulsar.Timeout):
        extra = receive(500)
        pytest.fail(f"unexpected extra message {extra.data()!r}")
    return got


def as_sent(msgs: list[pulsar.Message]) -> list[Sent]:
    return [Sent(m.data(), m.partition_key(), m.properties()) for m in msgs]


def ledgers(admin: AdminHttp, topic: str) -> list[dict[str, Any]]:
    path = topic.removeprefix("persistent://")
    found: list[dict[str, Any]] = admin.get(f"/admin/v2/persistent/{path}/internal-stats")[
        "ledgers"
    ]
    return found


def offloaded_ids(admin: AdminHttp, topic: str) -> list[int]:
    return [
        ledger["ledgerId"]
        for ledger in ledgers(admin, topic)
        if ledger["state"] == "OFFLOADED" and ledger["offloaded"] is True
    ]


def offload_status(admin: AdminHttp, topic: str) -> dict[str, Any]:
    status: dict[str, Any] = admin.get(
        f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/offload"
    )
    return status


def local_segments(data_dir: Path) -> set[int]:
    """Ids of the segments whose files are on the local disk: the ledgers ``L<segment id>``
    with files, found through the engine's partition records in the metadata store."""
    with contextlib.closing(
        sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    ) as db:
        rows = db.execute(
            "SELECT value FROM nodes WHERE path LIKE '/storage/partitions/L%'"
        ).fetchall()
    ledgers = {int(d["name"][1:]): d["id"] for d in (json.loads(v) for (v,) in rows)}
    return {
        ledger
        for ledger, pid in ledgers.items()
        if any((data_dir / "ledgers" / f"{pid:010d}").glob("*.log"))
    }


def parquet_objects(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / "tier" / topic.removeprefix("persistent://")).rglob("*.parquet"))


def cli(server: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--url", server.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def until(probe: Callable[[], Any], what: str) -> Any:
    return wait_until(probe, what, timeout=30)


# -- offload, restart, read back -------------------------------------------------------------------


@pytest.mark.slow
def test_an_offloaded_topic_reads_back_byte_identical_after_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    topic = "persistent://public/default/offload-restart"
    path = topic.removeprefix("persistent://")
    with StandaloneProcess(data_dir, extra_args=ARGS) as server:
        admin = AdminHttp(server.http_url)
        admin.ok("POST", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 0)
        client = connect(server)
        sent = produce_mixed(client, topic)
        client.close()
        assert admin.ok("PUT", f"/admin/v2/persistent/{path}/offload") == {"segments": 3}
        until(lambda: len(offloaded_ids(admin, topic)) == 3, "3 segments OFFLOADED")
        until(lambda: offload_status(admin, topic)["status"] == "SUCCESS", "status SUCCESS")
        status = offload_status(admin, topic)
        assert (status["lastError"], status["segmentsOffloaded"]) == ("", 3)
        ids = offloaded_ids(admin, topic)
        until(lambda: not local_segments(data_dir) & set(ids), "local copies deleted (lag 0)")
        assert [ledger["state"] for ledger in ledgers(admin, topic)][3:] == ["OPEN"]

    objects = parquet_objects(data_dir, topic)
    assert_parquet_holds(objects, sent)
    vouched = sorted(p for p in (data_dir / "tier").rglob("*") if p.is_file())
    strays = plant_strays(data_dir / "tier" / path)
    with StandaloneProcess(data_dir, extra_args=ARGS) as server:
        # Objects no segment record names are not ours to delete (a shared bucket): they
        # stay, and so does everything the records vouch for.
        files = sorted(p for p in (data_dir / "tier").rglob("*") if p.is_file())
        assert files == sorted([*vouched, *strays])
        admin = AdminHttp(server.http_url)
        assert offloaded_ids(admin, topic) == ids
        assert not local_segments(data_dir) & set(ids)
        client = connect(server)
        try:
            read_back_from_the_tier(client, topic, sent, ids)
        finally:
            client.close()


def plant_strays(topic_dir: Path) -> list[Path]:
    """Objects that look like ours but no record names: another cluster's in a shared
    bucket, or leftovers of a version that did not record its attempts."""
    strays = [
        topic_dir / f"{99:020d}.parquet",
        topic_dir / f"{99:020d}.manifest.json",
        topic_dir / f"{1:020d}.parquet.tmp-4242-0123456789ab",
    ]
    for stray in strays:
        stray.write_bytes(b"half an upload")
    return strays


def assert_parquet_holds(objects: list[Path], sent: list[Sent]) -> None:
    """The objects open with plain pyarrow and hold the first messages, in offset order."""
    assert len(objects) == 3
    table = pa.concat_tables(pq.read_table(p) for p in objects)
    assert table.column_names == TABLE_COLUMNS
    assert table.column("__offset").to_pylist() == list(range(table.num_rows))
    assert table.num_rows == 2 * SEGMENT_ENTRIES + 10 + 7 * 10  # 50 singles, 10 batches
    rows = table.select(["value", "__key", "__properties"]).to_pylist()
    stored = [Sent(r["value"], r["__key"], dict(r["__properties"])) for r in rows]
    assert stored == sent[: table.num_rows]
    assert set(table.column("__producer").to_pylist()) != {None}


def read_back_from_the_tier(
    client: pulsar.Client, topic: str, sent: list[Sent], ids: list[int]
) -> None:
    consumer = client.subscribe(
        topic, "after-restart", initial_position=pulsar.InitialPosition.Earliest
    )
    got = receive_all(consumer, len(sent))
    assert as_sent(got) == sent  # every message, byte-identical, in order
    mids = [m.message_id() for m in got]
    assert [mid.ledger_id() for mid in mids[:20]] == [ids[0]] * 20
    assert {mid.batch_index() for mid in mids[50:57]} == set(range(7))

    for start, inclusive, first in [(30, False, 31), (30, True, 30), (53, False, 54)]:
        reader = client.create_reader(topic, mids[start], start_message_id_inclusive=inclusive)
        assert as_sent(receive_all(reader, len(sent) - first)) == sent[first:]
        reader.close()

    when = got[37].publish_timestamp()
    expected = next(i for i, m in enumerate(got) if m.publish_timestamp() >= when)
    consumer.seek(when)
    assert as_sent([consumer.receive(RECEIVE_MS)]) == [sent[expected]]
    consumer.close()


# -- namespace policies ----------------------------------------------------------------------------


def test_offload_threshold_zero_offloads_each_segment_as_soon_as_it_closes(
    admin: AdminHttp, client: pulsar.Client
) -> None:
    ns = namespace(admin, offloadThreshold=0)
    topic = f"persistent://{ns}/eager"
    sent = produce_singles(client, topic, 0, 2 * SEGMENT_ENTRIES + 1)
    until(lambda: len(offloaded_ids(admin, topic)) == 2, "both closed segments OFFLOADED")
    assert [ledger["state"] for ledger in ledgers(admin, topic)][2:] == ["OPEN"]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert as_sent(receive_all(consumer, len(sent))) == sent


def test_offload_threshold_in_seconds_offloads_segments_once_old_enough(
    admin: AdminHttp, client: pulsar.Client
) -> None:
    ns = namespace(admin, offloadThresholdInSeconds=1)
    topic = f"persistent://{ns}/aged"
    produce_singles(client, topic, 0, SEGMENT_ENTRIES + 1)
    [closed, _] = ledgers(admin, topic)
    until(lambda: offloaded_ids(admin, topic) == [closed["ledgerId"]], "the segment OFFLOADED")
    status = offload_status(admin, topic)
    assert (status["status"], status["segmentsOffloaded"]) == ("SUCCESS", 1)


def test_negative_thresholds_offload_nothing(
    node: StandaloneProcess, admin: AdminHttp, client: pulsar.Client
) -> None:
    off = namespace(admin, offloadThreshold=-1, offloadThresholdInSeconds=-1)
    quiet = f"persistent://{off}/never"
    produce_singles(client, quiet, 0, 2 * SEGMENT_ENTRIES + 1)
    assert [ledger["state"] for ledger in ledgers(admin, quiet)] == ["CLOSED", "CLOSED", "OPEN"]
    # A control topic produced after those segments closed: once a sweep has offloaded it,
    # that same sweep also looked at the quiet topic (sweeps visit every loaded topic).
    control = f"persistent://{namespace(admin, offloadThreshold=0)}/control"
    produce_singles(client, control, 0, SEGMENT_ENTRIES + 1)
    until(lambda: offloaded_ids(admin, control), "the control topic offloaded")
    assert [ledger["state"] for ledger in ledgers(admin, quiet)] == ["CLOSED", "CLOSED", "OPEN"]
    assert parquet_objects(node.data_dir, quiet) == []
    assert len(parquet_objects(node.data_dir, control)) == 1


# -- retention -------------------------------------------------------------------------------------


def test_retention_deletes_offloaded_objects_too(
    node: StandaloneProcess, admin: AdminHttp, client: pulsar.Client
) -> None:
    ns = namespace(admin, offloadThreshold=0, offloadDeletionLagMs=0)
    topic = f"persistent://{ns}/retained"
    produce_singles(client, topic, 0, 2 * SEGMENT_ENTRIES + 1)
    ids = until(lambda: len(ids := offloaded_ids(admin, topic)) == 2 and ids, "2 OFFLOADED")
    until(lambda: not local_segments(node.data_dir) & set(ids), "local copies deleted")
    assert len(parquet_objects(node.data_dir, topic)) == 2
    admin.ok(
        "POST",
        f"/admin/v2/namespaces/{ns}/retention",
        {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
    )
    tier_dir = node.data_dir / "tier" / topic.removeprefix("persistent://")
    # Parquet objects and manifests alike (a manifest goes just after its object).
    until(lambda: not any(p.is_file() for p in tier_dir.rglob("*")), "offloaded objects deleted")
    assert [ledger["state"] for ledger in ledgers(admin, topic)] == ["OPEN"]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    [last] = receive_all(reader, 1)  # only the open segment's message is left
    assert last.data() == message(2 * SEGMENT_ENTRIES, "single").data


# -- bad input -------------------------------------------------------------------------------------


def test_offloading_an_unknown_topic_is_404_with_a_reason(
    node: StandaloneProcess, admin: AdminHttp
) -> None:
    reply = admin.refused("PUT", "/admin/v2/persistent/public/default/no-such-topic/offload")
    assert reply.status == 404 and "does not exist" in reply.reason
    run = cli(node, "topics", "offload", "persistent://public/default/no-such-topic")
    assert run.returncode != 0
    assert "does not exist" in run.stderr and "HTTP 404" in run.stderr
    topics = admin.get("/admin/v2/persistent/public/default")
    assert "persistent://public/default/no-such-topic" not in topics  # not created by it


def test_offloading_with_only_the_open_segment_holding_data_is_refused(
    node: StandaloneProcess, admin: AdminHttp, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/{unique('young')}"
    path = topic.removeprefix("persistent://")
    sent = produce_singles(client, topic, 0, 3)
    reply = admin.refused("PUT", f"/admin/v2/persistent/{path}/offload")
    assert reply.status in (400, 409)
    assert "nothing to offload" in reply.reason and "open segment" in reply.reason
    run = cli(node, "topics", "offload", topic)
    assert run.returncode != 0
    assert "nothing to offload" in run.stderr and "Traceback" not in run.stderr
    status = cli(node, "--json", "topics", "offload-status", topic)
    assert status.returncode == 0 and '"status": "NOT_RUN"' in status.stdout
    assert [ledger["state"] for ledger in ledgers(admin, topic)] == ["OPEN"]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert as_sent(receive_all(consumer, 3)) == sent


def test_the_cli_offloads_and_reports_status(
    node: StandaloneProcess, admin: AdminHttp, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/{unique('cli')}"
    produce_singles(client, topic, 0, SEGMENT_ENTRIES + 1)
    run = cli(node, "--json", "topics", "offload", topic)
    assert run.returncode == 0, run.stderr
    assert '"segments": 1' in run.stdout
    until(
        lambda: '"SUCCESS"' in cli(node, "--json", "topics", "offload-status", topic).stdout,
        "offload-status SUCCESS",
    )
    assert len(offloaded_ids(admin, topic)) == 1
