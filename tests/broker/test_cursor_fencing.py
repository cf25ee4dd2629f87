"""Cursor writes are compare-and-set: after a hand-over the old owner cannot overwrite the
new owner's cursor (issue 13). In-process, on the memory metadata store."""

from __future__ import annotations

import json

import pytest

from magnetar.broker.cursor import CursorStore
from magnetar.broker.errors import CursorFencedError
from magnetar.meta.memory import MemoryMetadataStore

PATH = "/cursors/public/default/t/sub"


async def test_an_old_owner_is_fenced_once_a_new_owner_wrote() -> None:
    meta = MemoryMetadataStore()
    old = await CursorStore.load(meta, PATH, 0, "SHARED")
    old.cursor.ack_cumulative(9)
    await old.flush()
    new = await CursorStore.load(meta, PATH, 0)  # the topic moved: a new owner loads it
    assert new.cursor.mark_delete == 10
    new.cursor.ack_cumulative(19)
    await new.flush()
    old.cursor.ack_cumulative(99)  # the old owner, not yet aware, acknowledges more
    with pytest.raises(CursorFencedError, match="another owner"):
        await old.flush()
    assert old.fenced
    old.changed()  # a fenced store schedules nothing
    node = await meta.get(PATH)
    assert node is not None and stored_mark_delete(node.value) == 20


async def test_coalesced_writes_of_one_owner_never_fence_it() -> None:
    meta = MemoryMetadataStore()
    store = await CursorStore.load(meta, PATH, 0)
    for i in range(50):
        store.cursor.ack_cumulative(i)
        store.changed()
        if i % 7 == 0:
            await store.flush()
    await store.flush()
    assert not store.fenced
    node = await meta.get(PATH)
    assert node is not None and stored_mark_delete(node.value) == 50


def stored_mark_delete(raw: bytes) -> int:
    return int(json.loads(raw)["markDelete"])
