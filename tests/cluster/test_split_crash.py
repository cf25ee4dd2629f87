"""A broker that dies in the middle of a bundle split (real ZooKeeper, in process): the split
is either not done at all or done whole, and the next broker owns exactly one bundle for any
topic — never two owners of overlapping ranges.

The crash is injected at each step of the split (after taking the halves; after writing the
boundaries, before giving the old node back): the store call that follows raises and the
broker's ZooKeeper session ends, as when its process is killed (its ephemeral nodes go)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
import zlib
from typing import Any

import pytest

from magnetar.broker.ownership import (
    BOUNDARIES,
    BUNDLES,
    Ownership,
    bundle_of,
    parse_range,
)
from magnetar.core.names import TopicName
from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import broker_info

NS = ("public", "default")


class Crash(Exception):
    """The broker process died here."""


def _topics(bundle: str) -> list[TopicName]:
    """Topics whose hash falls in each half of ``bundle``."""
    lo, hi = parse_range(bundle)
    mid = lo + (hi - lo) // 2
    names = (TopicName.parse(f"persistent://public/default/t-{i}") for i in itertools.count())
    low = next(n for n in names if lo <= _hash(n) < mid)
    high = next(n for n in names if mid <= _hash(n) < hi)
    return [low, high]


def _hash(name: TopicName) -> int:
    return zlib.crc32(str(name).encode()) & 0xFFFFFFFF  # as magnetar.broker.ownership


@pytest.mark.parametrize("crash_before", ["boundaries", "old-node"])
def test_a_split_cut_short_by_a_crash_leaves_one_owner_per_range(
    zookeeper: ZooKeeperProcess, crash_before: str
) -> None:
    url = zookeeper.url(f"/split-{uuid.uuid4().hex[:8]}")

    async def run() -> None:
        meta_a = ZooKeeperMetadataStore(url)
        meta_b = ZooKeeperMetadataStore(url)
        a = Ownership(meta_a, broker_info("a"))
        b = Ownership(meta_b, broker_info("b"))
        await a.start()
        await b.start()
        try:
            some = TopicName.parse("persistent://public/default/t-0")
            bundle = bundle_of(some)
            low, high = _topics(bundle)
            assert (await a.acquire(low)).id == "a:6650"
            real_put, real_delete = meta_a.put, meta_a.delete

            async def put(path: str, value: bytes, **kw: Any) -> Any:
                if crash_before == "boundaries" and path.startswith(BOUNDARIES + "/"):
                    raise Crash(path)
                return await real_put(path, value, **kw)

            async def delete(path: str, **kw: Any) -> Any:
                if crash_before == "old-node" and path == f"{BUNDLES}/public/default/{bundle}":
                    raise Crash(path)
                return await real_delete(path, **kw)

            meta_a.put, meta_a.delete = put, delete  # type: ignore[method-assign]
            with pytest.raises(Crash):
                await a.split(*NS, bundle)
            a.close()
            await meta_a.aclose()  # the process is gone: its session and ephemeral nodes too

            bounds = await b.boundaries(*NS)
            split_done = crash_before == "old-node"  # the boundaries were written
            assert (len(bounds) == 6) is split_done
            owners = {}
            for topic in (low, high):
                owner, owned = await b.lookup(topic, authoritative=True)
                assert owned and owner.id == "b:6650"
                owners[topic.path] = b.bundle_path(topic)
            ranges = [parse_range(p.rsplit("/", 1)[1]) for p in set(owners.values())]
            assert len(ranges) == (2 if split_done else 1)
            for first, second in itertools.combinations(sorted(ranges), 2):
                assert first[1] <= second[0], "two owned bundles overlap"
            held = await meta_b.list_children(f"{BUNDLES}/public/default")
            assert sorted(held) == sorted({p.rsplit("/", 1)[1] for p in owners.values()})
        finally:
            b.close()
            await meta_b.aclose()

    asyncio.run(run())
