"""Two brokers share one Iceberg catalog (SQLite on the storage they share) and one object
store. The owner of a topic is stopped between recording its commit intent and committing
it to the topic's table: the catalog is held busy by the test, so the owner waits inside
its commit, and then it is frozen (SIGSTOP) or killed (kill -9) there. The other broker
takes the topic over, fences the attempt and offloads the segment again. The table must
hold every offloaded offset once and reference only files that exist; a frozen owner that
wakes must not add its stale files (its commit is refused by the fence)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
import requests

from magnetar.testing.server import StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess
from magnetar.tier import attempt_prefix
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_brokers import _owner
from tests.cluster.test_offload_failover import (
    MESSAGES,
    NAME,
    TOPIC,
    _all_offloaded,
    _missing_objects,
    _publish,
    _start_offload,
    _take_over,
    tiered_cluster,
)
from tests.cluster.test_replicated_ledgers import read_all

pytestmark = pytest.mark.slow
TABLE = f"public.default.{NAME}"
FENCED = "magnetar.fenced."


@pytest.fixture
def iceberg_brokers(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Cluster:
    """The offload failover tests' cluster, with one Iceberg catalog file for both brokers."""
    catalog = f"sqlite:///{tmp_path / 'iceberg.db'}"
    return tiered_cluster(zookeeper, tmp_path, "--iceberg-catalog-url", catalog)


@contextlib.contextmanager
def _catalog_busy(db: Path) -> Iterator[sqlite3.Connection]:
    """Another writer holds the catalog file: readers go on, a commit waits for it (a
    broker waits up to 30 s for a lock)."""
    held = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        held.execute("BEGIN IMMEDIATE")
        yield held
        held.execute("ROLLBACK")
    finally:
        held.close()


def _commit_waiting(held: sqlite3.Connection) -> bool:
    """True once a commit waits for the catalog: its new metadata file (version N + 1 of
    the table's N) is written, and only the catalog's row is left to change."""
    (location,) = held.execute("SELECT metadata_location FROM iceberg_tables").fetchone()
    current = Path(location.removeprefix("file://"))
    version = int(current.name.split("-")[0])
    return any(int(p.name.split("-")[0]) > version for p in current.parent.glob("*.metadata.json"))


def _intent_waiting(cluster: Cluster) -> tuple[int, str] | None:
    """The segment and attempt of an offload whose commit intent is recorded and not yet
    committed, if any."""
    for lg in cluster.ledgers(TOPIC):
        info = lg["info"]
        intent = (info.get("offload") or {}).get("iceberg")
        if info["state"] == "OFFLOADING" and intent and not intent.get("committed"):
            return int(info["segment_id"]), str(intent["attempt"])
    return None


def _table(tmp_path: Path) -> Any:
    """The topic's table as a reader outside Magnetar sees it (pyiceberg, its own
    connection to the catalog file)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "magnetar", uri=f"sqlite:///{tmp_path / 'iceberg.db'}", warehouse=f"file://{tmp_path}"
    )
    try:
        return catalog.load_table(TABLE)
    finally:
        catalog.engine.dispose()  # no idle connection left holding the file


def _check_table(tmp_path: Path, ledgers: list[dict[str, Any]]) -> Any:
    """Every OFFLOADED segment's offsets in the table once, nothing else, and every data
    file the table references on disk; returns the table."""
    table = _table(tmp_path)
    offsets = table.scan(selected_fields=("__offset",)).to_arrow().column("__offset")
    expected = [
        offset
        for lg in ledgers
        if lg["info"]["state"] == "OFFLOADED"
        for offset in range(lg["info"]["first_offset"], lg["info"]["end_offset"])
    ]
    held = pc.sort_indices(offsets)
    assert offsets.take(held).to_pylist() == expected, "the table's offsets are not each once"
    files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    assert files and all(Path(f).is_file() for f in files), "the table references lost files"
    return table


def _written_by(tmp_path: Path, segment_id: int, attempt: str) -> list[Path]:
    """The files one offload attempt of the topic's segment left in the object store."""
    prefix = attempt_prefix(TOPIC.removeprefix("persistent://"), segment_id, attempt)
    return [p for p in (tmp_path / "tier" / prefix).rglob("*") if p.is_file()]


def _states_once_offloaded(cluster: Cluster, offloaded: int) -> list[str] | None:
    """The topic's segment states once at least ``offloaded`` are OFFLOADED."""
    states = [lg["info"]["state"] for lg in cluster.ledgers(TOPIC)]
    return states if states.count("OFFLOADED") >= offloaded else None


def _offloading(cluster: Cluster) -> tuple[StandaloneProcess, StandaloneProcess, list[bytes]]:
    """Publish and let the owner offload until its first segment is OFFLOADED (the table
    is made); returns the owner, the other broker and what was acknowledged."""
    first, second = cluster.brokers
    answer = requests.post(  # no compaction commit in the way of the offload's
        f"{first.http_url}/admin/v2/namespaces/public/default/icebergMaintenance",
        json=False,
        timeout=30,
    )
    assert answer.status_code == 204, answer.text
    acked = _publish(first.pulsar_url, 0, MESSAGES)
    owner = first if _owner(first.http_url, TOPIC) == first.pulsar_url else second
    _start_offload(owner)
    wait_for(
        lambda: any(lg["info"]["state"] == "OFFLOADED" for lg in cluster.ledgers(TOPIC)),
        60,
        "the first segment offloaded (the table made)",
    )
    return owner, second if owner is first else first, acked


@pytest.mark.parametrize("how", ["freeze", "kill"])
def test_an_owner_stopped_between_its_intent_and_its_commit_adds_nothing(
    iceberg_brokers: Cluster, tmp_path: Path, how: str
) -> None:
    cluster = iceberg_brokers
    try:
        owner, survivor, acked = _offloading(cluster)
        with _catalog_busy(tmp_path / "iceberg.db") as held:
            wait_for(lambda: _commit_waiting(held), 60, "a commit waiting for the catalog")
            intent = _intent_waiting(cluster)
            assert intent, "a commit waits with no offload intent recorded"
            segment_id, attempt = intent
            if how == "freeze":
                owner.pause()
            else:
                owner.kill()
        print(f"owner stopped ({how}) in the commit of segment {segment_id}, attempt {attempt}")
        time.sleep(5)  # past the 3 s session: ZooKeeper expires the owner's ownership
        acked += _take_over(survivor, MESSAGES)
        _start_offload(survivor)
        ledgers = wait_for(lambda: _all_offloaded(cluster), 90, "every segment offloaded")
        table = _check_table(tmp_path, ledgers)
        assert FENCED + attempt in table.properties, "the stopped attempt was not fenced"
        assert not _written_by(tmp_path, segment_id, attempt), "its files were not deleted"
        assert read_all(survivor.pulsar_url, TOPIC, len(acked)) == acked
        if how == "freeze":
            owner.resume()  # its commit goes on, against a table that fenced the attempt
            try:
                wait_for(
                    lambda: any(f"attempt {attempt} of segment" in ln for ln in owner.output),
                    45,
                    "the woken owner's commit refused by the fence",
                )
            except AssertionError:
                print("".join(ln for ln in owner.output if not ln.startswith(" ")), end="")
                raise
            assert "was fenced by the segment's next owner" in "".join(owner.output)
        after = cluster.ledgers(TOPIC)
        _check_table(tmp_path, after)
        assert not _missing_objects(tmp_path / "tier", after)
        assert not _written_by(tmp_path, segment_id, attempt)
        assert read_all(survivor.pulsar_url, TOPIC, len(acked)) == acked
    finally:
        cluster.stop()


def test_an_owner_killed_while_its_offloads_run_leaves_each_offset_once_in_the_table(
    iceberg_brokers: Cluster, tmp_path: Path
) -> None:
    """kill -9 at whatever step the owner's offloads are in (writing data files, recording
    an intent, committing, marking a segment OFFLOADED): the next owner settles each
    segment against the table (adopts a commit that landed, fences one that did not) and
    offloads the rest."""
    cluster = iceberg_brokers
    try:
        owner, survivor, acked = _offloading(cluster)
        states = wait_for(lambda: _states_once_offloaded(cluster, 5), 60, "five offloaded")
        owner.kill()
        print(f"owner killed: {states.count('OFFLOADED')} segments OFFLOADED")
        acked += _take_over(survivor, MESSAGES)
        _start_offload(survivor)
        ledgers = wait_for(lambda: _all_offloaded(cluster), 90, "every segment offloaded")
        _check_table(tmp_path, ledgers)
        assert not _missing_objects(tmp_path / "tier", ledgers)
        assert read_all(survivor.pulsar_url, TOPIC, len(acked)) == acked
    finally:
        cluster.stop()
