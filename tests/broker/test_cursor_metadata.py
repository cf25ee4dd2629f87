"""A cursor keeps the metadata text of its last commit (Kafka's commit metadata) beside its
position, through the same coalesced writes, and a reload brings it back. In-process, on the
memory metadata store."""

from __future__ import annotations

import json

from magnetar.broker.cursor import CursorStore
from magnetar.meta.memory import MemoryMetadataStore

PATH = "/cursors/public/default/t/group"


async def test_metadata_is_stored_with_the_position_and_reloaded() -> None:
    meta = MemoryMetadataStore()
    store = await CursorStore.load(meta, PATH, 0, "FAILOVER")
    store.cursor.reset(7)
    store.metadata = "hello world"
    await store.flush()
    again = await CursorStore.load(meta, PATH, 0)
    assert (again.cursor.mark_delete, again.metadata, again.sub_type) == (
        7,
        "hello world",
        "FAILOVER",
    )


async def test_a_metadata_change_alone_is_written_by_the_coalescing_writer() -> None:
    meta = MemoryMetadataStore()
    store = await CursorStore.load(meta, PATH, 0)
    store.metadata = "only the text changed"
    store.changed()
    await store.flush()
    node = await meta.get(PATH)
    assert node is not None and json.loads(node.value)["metadata"] == "only the text changed"


async def test_a_cursor_written_without_metadata_loads_with_none() -> None:
    meta = MemoryMetadataStore()
    await meta.put(PATH, json.dumps({"markDelete": 3, "acked": []}).encode())
    store = await CursorStore.load(meta, PATH, 0)
    assert (store.cursor.mark_delete, store.metadata) == (3, None)
