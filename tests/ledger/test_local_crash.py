"""kill -9 of a process writing through SegmentWriter + LocalSegments: a new writer on the
same directory fences and recovers the open segment; every acknowledged entry is there
exactly once, in order, and the new writer appends after it."""

from __future__ import annotations

import json
from pathlib import Path

from magnetar.core.config import build_settings
from magnetar.ledger.writer import segment_list_path
from magnetar.meta import open_metadata_store
from magnetar.testing.processes import PythonChild
from tests.ledger.local_crash_child import ACKED, NAME, READY, open_local

TIMEOUT_S = 60.0


def _acks(side: Path) -> dict[int, int]:
    """n -> offset of every acknowledgement the child logged (whole lines only)."""
    acks = {}
    for line in side.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            _, n, offset = line.split()
            acks[int(n)] = int(offset)
    return acks


async def _last_listed_state(data_dir: Path) -> tuple[int, str]:
    settings = build_settings(env={}, overrides={"data_dir": data_dir})
    meta = open_metadata_store(settings.metadata)
    try:
        node = await meta.get(segment_list_path(NAME))
        assert node is not None, "the child never wrote its segment list"
        last = json.loads(node.value)["ledgers"][-1]["info"]
        return int(last["segment_id"]), str(last["state"])
    finally:
        await meta.aclose()


async def test_acknowledged_entries_survive_kill_9_once_and_in_order(tmp_path: Path) -> None:
    data_dir, side = tmp_path / "data", tmp_path / "acks.txt"
    child = await PythonChild.start(
        "tests.ledger.local_crash_child",
        str(data_dir),
        str(side),
        stderr_path=tmp_path / "stderr",
    )
    async with child:  # SIGKILLed on the way out, mid-stream
        await child.wait_for_line(READY, timeout=TIMEOUT_S)
        await child.wait_for_line(ACKED, timeout=TIMEOUT_S)
    assert child.returncode == -9, child.failure("was not killed by the test")
    acks = _acks(side)
    assert len(acks) >= 300 and all(offset == n for n, offset in acks.items())
    open_sid, state = await _last_listed_state(data_dir)

    local = await open_local(data_dir)
    try:
        writer, segments = local.writer, local.segments
        if state == "OPEN":  # the usual case: killed while appending to it
            assert writer.recovered == 1 and segments.store.is_fenced(open_sid)
        stored = []
        for info in writer.segments():
            assert info.state.value == "CLOSED"
            entries = await segments.read(info.segment_id, 0, 1 << 30)
            assert [e.base_offset for e in entries] == list(
                range(info.first_offset, info.end_offset)
            )
            stored += [int(e.payload) for e in entries]
        assert stored == list(range(len(stored)))  # each once, in order, no gap
        assert len(stored) > max(acks)  # every acknowledged one is there
        assert writer.end == len(stored)
        after = await writer.append(b"after")
        assert after.base_offset == len(stored)
        [again] = await segments.read(after.segment_id, 0, 0)
        assert again.payload == b"after"
    finally:
        await local.aclose()
