"""The ObjectStore contract: one suite, run against every backend (a local directory, and
S3 through a real S3-protocol server), plus an offload and read-back through a managed
ledger on each."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from magnetar.storage import SegmentState
from magnetar.tier import ObjectNotFoundError, ObjectStore, key_of, manifest_key, object_key
from magnetar.tier.object_store import TMP_MARK
from tests.tier.rig import OpenRig, append_mixed, messages, read_all, reopen


def test_put_then_get_returns_the_same_bytes(store: ObjectStore) -> None:
    data = bytes(range(256)) * 1000
    store.put("a/b/object.bin", data)
    assert store.get("a/b/object.bin") == data
    assert store.size("a/b/object.bin") == len(data)
    assert store.exists("a/b/object.bin")


def test_an_empty_object_is_an_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get("empty") == b""
    assert store.size("empty") == 0
    assert store.exists("empty")


def test_put_replaces_the_whole_object_and_leaves_no_temporary_key(store: ObjectStore) -> None:
    store.put("k/v", b"first version, rather long" * 100)
    store.put("k/v", b"second")
    assert store.get("k/v") == b"second"
    assert store.list() == ["k/v"]
    assert not [k for k in store.list() if TMP_MARK in k]


def test_open_is_a_random_access_file_parquet_can_read(store: ObjectStore) -> None:
    table = pa.table({"offset": list(range(1000)), "value": [b"x" * (i % 7) for i in range(1000)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=100)
    store.put("p/segment.parquet", sink.getvalue())
    with store.open("p/segment.parquet") as f:
        assert f.size() == len(sink.getvalue())
        f.seek(4)
        assert f.read(4) == sink.getvalue()[4:8]
    with store.open("p/segment.parquet") as f:
        parquet = pq.ParquetFile(f)
        assert parquet.metadata.num_row_groups == 10
        assert parquet.read_row_group(7).column("offset").to_pylist() == list(range(700, 800))


@pytest.mark.parametrize("call", ["get", "open", "size"])
def test_a_missing_key_raises_object_not_found(store: ObjectStore, call: str) -> None:
    store.put("present/x", b"1")
    with pytest.raises(ObjectNotFoundError, match="absent/x") as info:
        getattr(store, call)("absent/x")
    assert info.value.code == "tier.not_found"
    assert not info.value.retriable
    assert store.exists("absent/x") is False


def test_delete_removes_and_deleting_a_missing_key_is_fine(store: ObjectStore) -> None:
    store.put("d/1", b"one")
    store.put("d/2", b"two")
    store.delete("d/1")
    store.delete("d/1")  # again: already gone, no error
    store.delete("never/there")
    assert not store.exists("d/1")
    assert store.list() == ["d/2"]


def test_list_gives_every_key_under_a_prefix_sorted(store: ObjectStore) -> None:
    for key in ["b/2", "a/1", "a/deep/3", "ab/4", "c"]:
        store.put(key, key.encode())
    assert store.list() == ["a/1", "a/deep/3", "ab/4", "b/2", "c"]
    assert store.list("a") == ["a/1", "a/deep/3"]  # a directory-like prefix: not "ab/4"
    assert store.list("a/") == ["a/1", "a/deep/3"]
    assert store.list("a/deep") == ["a/deep/3"]
    assert store.list("nothing-here") == []


def test_segment_object_keys_round_trip(store: ObjectStore) -> None:
    key = object_key("tenant-1/ns.x/topic_y-partition-3", 42, "0a1b2c")
    assert key == "tenant-1/ns.x/topic_y-partition-3/00000000000000000042/0a1b2c/data.parquet"
    store.put(key, b"parquet bytes")
    assert store.list("tenant-1/ns.x") == [key]
    assert store.get(key) == b"parquet bytes"


async def test_offload_and_read_back_through_a_managed_ledger(
    store: ObjectStore, open_rig: OpenRig
) -> None:
    """Offload every closed segment to this backend, drop the local copies, restart: every
    message reads back, in order, from the object store."""
    rig = await open_rig(store)
    await append_mixed(rig.ledger, 23)
    before = messages(await read_all(rig.ledger))
    closed = rig.in_state(SegmentState.CLOSED)
    assert len(closed) == 4
    for seg in closed:
        done = await rig.ledger.offload(seg.segment_id)
        assert done.state is SegmentState.OFFLOADED
        assert done.offload is not None and store.exists(done.offload["key"])
        await rig.ledger.drop_local_copy(seg.segment_id)
    rig = await reopen(rig, open_rig)
    # the segment open at the stop was closed at the restart, a new one opened (as Pulsar
    # closes a ledger): both local
    assert [s.local for s in rig.ledger.segments()] == [False] * 4 + [True, True]
    assert messages(await read_all(rig.ledger)) == before
    parquet = [key_of(rig.ledger.name, rig.segment(s.segment_id)) for s in closed]
    manifests = [manifest_key(k) for k in parquet]
    assert store.list() == sorted(parquet + manifests)
