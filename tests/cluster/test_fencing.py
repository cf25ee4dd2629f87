"""Fences on a storage node: many at once (a new owner recovers every topic of a bundle
together), each answered and each durable across a kill -9."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.cluster.client import NodeConnection
from magnetar.cluster.wire import LAC, LEDGER, Op, Status
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.slow


async def _fence_all(host: str, port: int, ledgers: range) -> list[tuple[Status, bytes]]:
    conn = NodeConnection(f"{host}:{port}", host, port, timeout=30)
    try:
        return await asyncio.gather(*(conn.call(Op.FENCE, LEDGER.pack(i)) for i in ledgers))
    finally:
        await conn.aclose()


def test_concurrent_fences_are_all_answered_and_all_durable(cluster: Cluster) -> None:
    """The regression (found by bench/failover.py): two fences at once rewrote fenced.json
    through the same temporary file; one failed with an error answer, which recovery read
    as a fence and crashed on (struct.error), so the topic could not be loaded."""
    node = cluster.add_node()
    ledgers = range(1000, 1040)
    answers = asyncio.run(_fence_all("127.0.0.1", node.storage_port, ledgers))
    assert [status for status, _ in answers] == [Status.OK] * len(ledgers)
    assert all(LAC.unpack(body) == (-1, -1) for _, body in answers)  # nothing stored yet
    node.kill()
    assert set(json.loads((node.data_dir / "fenced.json").read_text())) >= set(ledgers)
    again = cluster.restart_node(node)
    answers = asyncio.run(_fence_all("127.0.0.1", again.storage_port, ledgers))
    assert [status for status, _ in answers] == [Status.OK] * len(ledgers)
