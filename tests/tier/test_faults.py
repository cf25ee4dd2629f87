"""Faults during offload: a failing or unreachable object store, a crash (SIGKILL) at each
stage of an offload, and the leftovers a crash leaves in the store.

The promise under test (DESIGN.md decision 4): a segment is always either local (CLOSED)
or verified in the object store (OFFLOADED), never neither; a failed offload loses nothing
and a later retry succeeds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.storage import SegmentState
from magnetar.testing.faults import FaultyObjectStore
from magnetar.testing.processes import PythonChild
from magnetar.testing.server import free_port
from magnetar.tier import (
    LocalObjectStore,
    Manifest,
    ObjectStoreUnavailableError,
    OffloadVerificationError,
    S3ObjectStore,
    TierError,
    key_of,
    manifest_key,
    object_key,
)
from magnetar.tier.object_store import TMP_MARK
from magnetar.tier.offloader import attempt_prefix
from tests.tier import offload_child
from tests.tier.rig import OpenRig, Rig, append_mixed, expected_messages, messages, read_all


@pytest.fixture
def faulty(tmp_path: Path) -> FaultyObjectStore:
    return FaultyObjectStore(LocalObjectStore(tmp_path / "tier"))


def segment_objects(rig: Rig, segment_id: int) -> list[str]:
    """The object and manifest an OFFLOADED segment's record names."""
    key = key_of(rig.ledger.name, rig.segment(segment_id))
    return sorted([key, manifest_key(key)])


async def assert_still_local_and_whole(rig: Rig, segment_id: int, entries: int) -> None:
    seg = rig.segment(segment_id)
    assert (seg.state, seg.local) == (SegmentState.CLOSED, True)
    # Nothing offloaded; at most the failed attempt stays recorded, when even deleting
    # what it wrote failed (the store is unreachable), for a later cleanup.
    assert seg.offload is None or set(seg.offload) == {"attempts"}
    assert messages(await read_all(rig.ledger)) == expected_messages(entries)


# -- a failing store -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ({"op": "put"}, ObjectStoreUnavailableError),
        ({"op": "put", "partial": True}, ObjectStoreUnavailableError),
        ({"op": "put", "after": True}, ObjectStoreUnavailableError),  # written, reply lost
        ({"op": "get"}, ObjectStoreUnavailableError),  # the verification read
    ],
    ids=["put", "put-cut-off", "put-reply-lost", "verify-read"],
)
async def test_a_failed_offload_leaves_the_segment_local_and_a_retry_succeeds(
    open_rig: OpenRig, faulty: FaultyObjectStore, fault: dict[str, object], error: type
) -> None:
    rig = await open_rig(faulty)
    await append_mixed(rig.ledger, 7)
    [sid] = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    faulty.fail(**fault)  # type: ignore[arg-type]
    with pytest.raises(error) as info:
        await rig.ledger.offload(sid)
    assert info.value.retriable
    await assert_still_local_and_whole(rig, sid, 7)
    faulty.heal()
    done = await rig.ledger.offload(sid)
    assert done.state is SegmentState.OFFLOADED
    assert [k for k in faulty.list() if TMP_MARK not in k] == segment_objects(rig, sid)
    await rig.ledger.drop_local_copy(sid)
    assert messages(await read_all(rig.ledger)) == expected_messages(7)


async def test_an_object_that_reads_back_different_is_never_trusted(
    open_rig: OpenRig, faulty: FaultyObjectStore
) -> None:
    rig = await open_rig(faulty)
    await append_mixed(rig.ledger, 7)
    [sid] = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    faulty.corrupt("get")
    with pytest.raises(OffloadVerificationError, match="checksum"):
        await rig.ledger.offload(sid)
    await assert_still_local_and_whole(rig, sid, 7)
    faulty.heal()
    assert (await rig.ledger.offload(sid)).state is SegmentState.OFFLOADED


async def test_an_unreachable_s3_endpoint_fails_the_offload_and_loses_nothing(
    open_rig: OpenRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "magnetar-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "magnetar-test-secret")
    nowhere = S3ObjectStore("tier-bucket", endpoint=f"http://127.0.0.1:{free_port()}")
    rig = await open_rig(nowhere)
    await append_mixed(rig.ledger, 7)
    [sid] = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    with pytest.raises(ObjectStoreUnavailableError, match="tier-bucket") as info:
        await rig.ledger.offload(sid)
    assert info.value.retriable
    await assert_still_local_and_whole(rig, sid, 7)


async def test_reads_of_an_offloaded_segment_fail_retriably_then_recover(
    open_rig: OpenRig, faulty: FaultyObjectStore
) -> None:
    """While the store is down a read of a segment that lives only there says so
    (retriable); once the store is back the same read works: failures are not cached."""
    rig = await open_rig(faulty, row_group_rows=2, segment_max_entries=40)
    await append_mixed(rig.ledger, 41)
    [seg] = rig.in_state(SegmentState.CLOSED)
    await rig.ledger.offload(seg.segment_id)
    await rig.ledger.drop_local_copy(seg.segment_id)
    assert (await rig.ledger.read(0, max_entries=1))[0].base_offset == 0  # footer now cached
    faulty.fail("open")
    for _ in range(2):  # a row group far from the cached ones
        with pytest.raises(ObjectStoreUnavailableError) as info:
            await rig.ledger.read(seg.last_offset)
        assert info.value.retriable
    with pytest.raises(TierError):
        await rig.ledger.find_offset(0)
    faulty.heal()
    [last] = await rig.ledger.read(seg.last_offset, max_entries=1)
    assert last.base_offset <= seg.last_offset < last.next_offset
    assert messages(await read_all(rig.ledger)) == expected_messages(41)


async def test_an_offload_cut_off_by_a_crash_is_undone_at_the_next_start(
    open_rig: OpenRig,
) -> None:
    """The metadata says OFFLOADING when the process dies: recovery makes it CLOSED again
    and a new offload works."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 7)
    [sid] = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    info = await rig.engine.update_segment(rig.ledger.name, sid, state=SegmentState.OFFLOADING)
    assert info.state is SegmentState.OFFLOADING
    store = rig.tier.store
    await rig.aclose()
    rig = await open_rig(store)
    await assert_still_local_and_whole(rig, sid, 7)
    assert (await rig.ledger.offload(sid)).state is SegmentState.OFFLOADED


# -- SIGKILL during an offload -------------------------------------------------------------------


@pytest.mark.parametrize("stage", offload_child.STAGES)
async def test_sigkill_during_an_offload_leaves_the_segment_local_or_verified(
    tmp_path: Path, open_rig: OpenRig, stage: str
) -> None:
    root = tmp_path / "node"
    stderr = tmp_path / "child.stderr"
    child = await PythonChild.start(
        "tests.tier.offload_child", str(root), stage, stderr_path=stderr
    )
    async with child:  # SIGKILLed on the way out
        await child.wait_for_line(stage, timeout=60)
    assert child.returncode is not None and child.returncode < 0  # killed, not exited

    store = LocalObjectStore(root / "tier")
    leftovers = store.list()
    # Opening the ledger deletes what the cut-off attempt wrote: it was recorded first.
    rig = await open_rig(store, settings=offload_child.rig_settings(root / "data"))
    first, second = [s for s in rig.ledger.segments()][:2]
    assert second.state is SegmentState.CLOSED and second.local
    if first.state is SegmentState.OFFLOADED:  # verified: the manifest's object reads back
        assert stage in ("offloaded", "dropped")
        assert first.local is (stage == "offloaded")
        key = key_of(rig.ledger.name, first)
        manifest = Manifest.from_bytes(store.get(manifest_key(key)))
        rig.tier.offloader.verify(manifest)
        assert first.offload is not None and first.offload["sha256"] == manifest.sha256
        assert store.list() == leftovers == segment_objects(rig, first.segment_id)
    else:
        assert stage in ("upload", "verify")
        assert (first.state, first.local, first.offload) == (SegmentState.CLOSED, True, None)
        assert leftovers, "the cut-off offload left nothing to clean up"
        assert store.list() == []
    assert messages(await read_all(rig.ledger)) == expected_messages(offload_child.ENTRIES)
    if first.state is SegmentState.CLOSED:
        assert (await rig.ledger.offload(first.segment_id)).state is SegmentState.OFFLOADED


async def test_cleanup_deletes_recorded_attempts_and_nothing_else(open_rig: OpenRig) -> None:
    """A bucket may be shared (no prefix, several clusters): objects this ledger did not
    record — even ones that look exactly like its own — are never deleted."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 12)
    offloaded, closed = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    await rig.ledger.offload(offloaded)
    store, name = rig.tier.store, rig.ledger.name
    ours = store.list()
    # An attempt this ledger recorded and abandoned (its objects survived a failed delete).
    abandoned = "feedfacecafe0001"
    prefix = attempt_prefix(name, closed, abandoned)
    store.put(f"{prefix}/data.parquet{TMP_MARK}1234-abcd", b"cut off")
    await rig.engine.update_segment(name, closed, offload={"attempts": [abandoned]})
    strangers = [
        object_key(name, closed),  # another cluster's segment with the same name and id
        object_key(name, offloaded) + f"{TMP_MARK}1234-abcd",
        attempt_prefix(name, closed, "0123456789abcdef") + "/data.parquet",  # not recorded
        object_key("public/default/another-topic", 3),
        "junk/readme.txt",
    ]
    for key in strangers:
        store.put(key, b"not ours")
    assert await rig.ledger.clean_abandoned() == 1
    assert store.list() == sorted([*ours, *strangers])
    assert rig.segment(closed).offload is None
    assert ours == segment_objects(rig, offloaded)
    await rig.ledger.drop_local_copy(offloaded)
    assert messages(await read_all(rig.ledger)) == expected_messages(12)


async def test_cleanup_at_run_time_spares_an_upload_in_flight(
    open_rig: OpenRig, faulty: FaultyObjectStore
) -> None:
    """The attempt being uploaded right now is live: cleanup leaves it alone."""
    rig = await open_rig(faulty)
    await append_mixed(rig.ledger, 7)
    [sid] = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    gate = faulty.block("get")  # hold the offload at its verification read
    offload = asyncio.create_task(rig.ledger.offload(sid))
    await asyncio.to_thread(gate.reached.wait, 30)
    assert await rig.ledger.clean_abandoned() == 0
    gate.release()
    assert (await offload).state is SegmentState.OFFLOADED
    assert faulty.list() == segment_objects(rig, sid)
