"""A broker dies or freezes in the middle of offloading a topic's closed segments to the
object store both brokers share: the new owner reverts the cut-off offload, offloads the
segments afresh, and the topic reads back every acknowledged message once, in order. A
frozen owner that wakes afterwards finishes its stale offload, which must change nothing:
no record reverted, no object the new owner's records name deleted."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pulsar
import pytest
import requests

from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.server import StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_brokers import _owner
from tests.cluster.test_replicated_ledgers import read_all

pytestmark = pytest.mark.slow
NAME = "offload-failover"
TOPIC = f"persistent://public/default/{NAME}"
OFFLOAD = f"/admin/v2/persistent/public/default/{NAME}/offload"
MESSAGES = 3000  # ~210 bytes each: some thirty closed segments of 20 kB to offload
PAD = b"x" * 200


@pytest.fixture
def tiered_brokers(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Cluster:
    return tiered_cluster(zookeeper, tmp_path)


def tiered_cluster(zookeeper: ZooKeeperProcess, tmp_path: Path, *extra: str) -> Cluster:
    """Three storage nodes and two brokers with small segments, sharing one object store
    (a new owner reads what the old one offloaded), ZooKeeper sessions of 3 s; ``extra``:
    more options of the brokers."""
    url = zookeeper.url(f"/offload-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    for _ in range(3):
        cluster.add_node()
    for _ in range(2):
        cluster.add_broker(
            "--segment-max-bytes", "20000",
            "--offload-deletion-lag-ms", "0",
            "--offload-check-interval", "1",  # local copies dropped soon after the offload
            "--tier-url", f"file://{tmp_path / 'tier'}",
            *extra,
        )  # fmt: skip
    return cluster


def _message(i: int) -> bytes:
    return f"m-{i:05d}-".encode() + PAD


def _publish(url: str, first: int, count: int) -> list[bytes]:
    """Send ``count`` messages; returns those acknowledged (all of them, or it fails)."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False, block_if_queue_full=True)
        acked: list[bytes] = []

        def done(value: bytes) -> Any:
            return lambda result, _mid: result == pulsar.Result.Ok and acked.append(value)

        for i in range(first, first + count):
            producer.send_async(_message(i), done(_message(i)))
        producer.flush()
    finally:
        client.close()
    assert len(acked) == count, f"only {len(acked)} of {count} messages acknowledged"
    return sorted(acked)


def _records_path(topic: str) -> str:
    return f"/managed-ledgers/{quote(topic.removeprefix('persistent://'), safe='')}"


def _offload_under_way(cluster: Cluster, offloaded: int) -> dict[str, int]:
    """Poll the topic's segment records every 10 ms (one ZooKeeper session, not one per
    look) until a segment is OFFLOADING or OFFLOADED, and at least ``offloaded`` are
    OFFLOADED; returns how many are in each state (and how many OFFLOADED are remote)."""

    async def poll() -> dict[str, int]:
        store = ZooKeeperMetadataStore(cluster.url.partition("?")[0])
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                node = await store.get(_records_path(TOPIC))
                infos = [lg["info"] for lg in json.loads(node.value)["ledgers"]]
                states = [i["state"] for i in infos]
                counts = {s: states.count(s) for s in ("CLOSED", "OFFLOADING", "OFFLOADED")}
                counts["remote"] = sum(not i["local"] for i in infos)
                started = counts["OFFLOADING"] or counts["OFFLOADED"]
                if started and counts["OFFLOADED"] >= offloaded:
                    return counts
                await asyncio.sleep(0.01)
            raise AssertionError("the offload never started")
        finally:
            await store.aclose()

    return asyncio.run(poll())


def _start_offload(b: StandaloneProcess) -> None:
    answer = requests.put(f"{b.http_url}{OFFLOAD}", params={"messageId": "latest"}, timeout=30)
    assert answer.status_code == 202, answer.text


def _all_offloaded(cluster: Cluster) -> list[dict[str, Any]] | None:
    """The records once every segment but the open one is OFFLOADED with no local copy."""
    ledgers = cluster.ledgers(TOPIC)
    closed = [lg["info"] for lg in ledgers[:-1]]
    if closed and all(i["state"] == "OFFLOADED" and not i["local"] for i in closed):
        return ledgers
    return None


def _named_objects(ledgers: list[dict[str, Any]]) -> list[str]:
    """The objects the OFFLOADED records read from."""
    named: list[str] = []
    for lg in ledgers:
        info = lg["info"]
        if info["state"] == "OFFLOADED":
            named += info["offload"].get("objects") or [info["offload"]["key"]]
    return named


def _objects_outside_records(tier: Path, ledgers: list[dict[str, Any]]) -> list[str]:
    """Files in the object store that lie under no OFFLOADED record's attempt: what an
    abandoned attempt left behind. An attempt writes everything under
    ``<partition>/<segment id>/<attempt>/``, and the record names its objects there."""
    live = {str(Path(key).parent) for key in _named_objects(ledgers)}
    files = [str(p.relative_to(tier)) for p in tier.rglob("*") if p.is_file()]
    return sorted(f for f in files if str(Path(f).parent) not in live)


def _missing_objects(tier: Path, ledgers: list[dict[str, Any]]) -> list[str]:
    return [key for key in _named_objects(ledgers) if not (tier / key).is_file()]


def _take_over(survivor: StandaloneProcess, first: int) -> list[bytes]:
    """A client of the survivor publishes: the survivor takes the topic (fences and
    recovers the open segment) and opens a new one; returns what it acknowledged."""
    acked = _publish(survivor.pulsar_url, first, 100)
    assert _owner(survivor.http_url, TOPIC) == survivor.pulsar_url
    return acked


def _offloading_owner(
    cluster: Cluster, offloaded_first: int
) -> tuple[list[bytes], StandaloneProcess, StandaloneProcess, dict[str, int]]:
    """Publish, start the owner's offload and wait for the moment to strike: what was
    acknowledged, the owner, the other broker, and the records' states at that moment."""
    first, second = cluster.brokers
    acked = _publish(first.pulsar_url, 0, MESSAGES)
    owner = first if _owner(first.http_url, TOPIC) == first.pulsar_url else second
    _start_offload(owner)
    counts = _offload_under_way(cluster, offloaded_first)
    return acked, owner, second if owner is first else first, counts


def _progress(when: str, counts: dict[str, int]) -> None:
    print(
        f"{when}: {counts['OFFLOADED']} segments OFFLOADED ({counts['remote']} of them no "
        f"longer local), {counts['OFFLOADING']} OFFLOADING, {counts['CLOSED']} CLOSED"
    )


# the moment of the kill or freeze: at the first segment's offload, or with some segments
# offloaded already (the new owner reads those from the objects the old owner wrote)
MOMENTS = pytest.mark.parametrize("offloaded_first", [0, 10])


@MOMENTS
def test_a_killed_owner_mid_offload_loses_and_duplicates_nothing(
    tiered_brokers: Cluster, tmp_path: Path, offloaded_first: int
) -> None:
    cluster = tiered_brokers
    try:
        acked, owner, survivor, counts = _offloading_owner(cluster, offloaded_first)
        owner.kill()
        _progress("owner killed", counts)
        acked += _take_over(survivor, MESSAGES)
        _start_offload(survivor)
        ledgers = wait_for(lambda: _all_offloaded(cluster), 60, "every closed segment offloaded")
        assert not [lg for lg in ledgers if lg["info"]["state"] == "OFFLOADING"]
        assert read_all(survivor.pulsar_url, TOPIC, len(acked)) == acked
        assert not _missing_objects(tmp_path / "tier", ledgers)
        stray = _objects_outside_records(tmp_path / "tier", cluster.ledgers(TOPIC))
        assert not stray, f"objects of abandoned offload attempts stay: {stray[:5]}"
    finally:
        cluster.stop()


@MOMENTS
def test_a_frozen_owner_waking_after_the_new_owner_offloaded_changes_nothing(
    tiered_brokers: Cluster, tmp_path: Path, offloaded_first: int
) -> None:
    cluster = tiered_brokers
    try:
        acked, zombie, survivor, counts = _offloading_owner(cluster, offloaded_first)
        zombie.pause()
        _progress("owner frozen", counts)
        time.sleep(5)  # past the 3 s session: ZooKeeper expires the zombie's ownership
        acked += _take_over(survivor, MESSAGES)
        _start_offload(survivor)
        offloaded = wait_for(lambda: _all_offloaded(cluster), 60, "every segment offloaded")
        assert read_all(survivor.pulsar_url, TOPIC, len(acked)) == acked
        zombie.resume()
        wait_for(
            lambda: any(
                "lost its ZooKeeper session" in line or "fenced" in line for line in zombie.output
            ),
            30,
            "the woken broker to notice it lost the topic",
        )
        # Its stale offload (if the freeze caught one) ends by itself: refused, or cut off
        # with the partition, when it drops what it wrote (no record names that attempt
        # any more: the new owner cleaned it up while the zombie slept).
        try:
            wait_for(
                lambda: not _objects_outside_records(tmp_path / "tier", cluster.ledgers(TOPIC)),
                45,  # it reads the record again once its store has a new session
                "the woken broker to drop the objects of its cut-off offload",
            )
        except AssertionError:
            print("".join(line for line in zombie.output if "offload" in line), end="")
            print(_objects_outside_records(tmp_path / "tier", cluster.ledgers(TOPIC)))
            raise
        after = cluster.ledgers(TOPIC)
        assert [lg["info"] for lg in after[: len(offloaded) - 1]] == [
            lg["info"] for lg in offloaded[:-1]
        ], "the woken broker changed records of the new owner's offloaded segments"
        assert not _missing_objects(tmp_path / "tier", after)
        assert read_all(survivor.pulsar_url, TOPIC, len(acked)) == acked
    finally:
        cluster.stop()
