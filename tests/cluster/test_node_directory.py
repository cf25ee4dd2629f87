"""The broker's directory of storage nodes: which nodes a new ledger gets (in-process, on the
in-memory metadata store; the cluster tests run the same with real processes)."""

from __future__ import annotations

import asyncio
import json

from magnetar.cluster.client import NodeDirectory
from magnetar.cluster.node import NODES_PATH, READ_ONLY, READ_WRITE
from magnetar.meta.memory import MemoryMetadataStore


async def _directory(modes: dict[str, str]) -> NodeDirectory:
    meta = MemoryMetadataStore()
    await meta.put(NODES_PATH, b"")
    for i, (node_id, mode) in enumerate(modes.items()):
        value = {"address": "127.0.0.1", "port": 9000 + i, "freeBytes": 1 << 30, "mode": mode}
        await meta.put(f"{NODES_PATH}/{node_id}", json.dumps({**value, "pid": 100 + i}).encode())
    nodes = NodeDirectory(meta, timeout=1.0)
    await nodes.refresh()
    return nodes


def test_a_new_ledger_prefers_nodes_that_did_not_fail() -> None:
    async def main() -> None:
        nodes = await _directory(
            {"a": READ_WRITE, "b": READ_WRITE, "c": READ_WRITE, "d": READ_WRITE}
        )
        nodes.suspect("d")
        for _ in range(20):
            chosen = nodes.ensemble(3)
            assert chosen is not None and sorted(n.node_id for n in chosen) == ["a", "b", "c"]

    asyncio.run(main())


def test_a_node_that_failed_lately_makes_up_the_number_when_the_others_are_too_few() -> None:
    """A rollover decided just before a node's failure was seen must still get its ledger
    (the writer writes around a node that is really gone): the stall found in CI, where the
    successor of a full ledger waited for a third node that had only failed once."""

    async def main() -> None:
        nodes = await _directory({"a": READ_WRITE, "b": READ_WRITE, "c": READ_WRITE})
        nodes.suspect("c")
        assert [n.node_id for n in nodes.writable()] == ["a", "b"]
        chosen = nodes.ensemble(3)
        assert chosen is not None and sorted(n.node_id for n in chosen) == ["a", "b", "c"]

    asyncio.run(main())


def test_too_few_read_write_nodes_give_no_ensemble() -> None:
    async def main() -> None:
        nodes = await _directory({"a": READ_WRITE, "b": READ_WRITE, "c": READ_ONLY})
        nodes.suspect("b")
        assert nodes.ensemble(3) is None
        assert nodes.ensemble(2) is not None  # a (trusted) and b (the only other one)

    asyncio.run(main())


def test_a_failed_member_is_replaced_by_a_trusted_spare_else_by_one_that_failed_lately() -> None:
    """BookKeeper's replaceBookie: quarantined nodes are candidates only when no other is
    left (the writer then takes one only if it answers a ping: tests/cluster)."""

    async def main() -> None:
        nodes = await _directory(
            {"a": READ_WRITE, "b": READ_WRITE, "c": READ_WRITE, "d": READ_ONLY}
        )
        nodes.suspect("c")
        assert [n.node_id for n in nodes.spares({"a"})] == ["b"]
        assert [n.node_id for n in nodes.spares({"a", "b"})] == ["c"]  # failed lately
        assert nodes.spares({"a", "b", "c"}) == []  # d is read-only
        assert nodes.trusted("b") and not nodes.trusted("c") and not nodes.trusted("zz")

    asyncio.run(main())
