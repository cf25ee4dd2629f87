"""A bundle just unloaded goes where the placement says, not back to the broker that gave it
up (real ZooKeeper, in process). A producer that a lookup, answered just before the unload,
sent to the old owner arrives there after the bundle node is gone: that broker must not take
the bundle again on the spot, or the unload moved nothing."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from magnetar.broker.ownership import NotOwnerError, Ownership, bundle_of
from magnetar.core.names import TopicName
from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import broker_info


def test_a_client_without_a_fresh_lookup_does_not_pull_an_unloaded_bundle_back(
    zookeeper: ZooKeeperProcess,
) -> None:
    url = zookeeper.url(f"/unload-{uuid.uuid4().hex[:8]}")
    topic = TopicName.parse("persistent://public/default/unloaded")
    elsewhere = next(
        name
        for name in (TopicName.parse(f"persistent://public/default/t-{i}") for i in range(100))
        if bundle_of(name) != bundle_of(topic)
    )

    async def run() -> None:
        metas = [ZooKeeperMetadataStore(url) for _ in range(2)]
        a, b = (Ownership(m, broker_info(n)) for m, n in zip(metas, "ab", strict=True))
        await a.start()
        await b.start()
        try:
            assert (await a.acquire(topic)).id == "a:6650"
            await a.release(a.bundle_path(topic))  # as an unload does, its topics closed
            with pytest.raises(NotOwnerError, match="just unloaded here; look it up again"):
                await a.check(topic)  # the producer sent to the old owner
            assert await a.owner(topic) is None  # nothing taken
            owner, owned = await b.lookup(topic)  # its client's next lookup: both own nothing
            assert (owner.id, owned) == ("b:6650", True)
            with pytest.raises(NotOwnerError):
                await a.check(topic)

            # the broker that unloaded a bundle still gets it when the placement names it
            assert (await a.acquire(elsewhere)).id == "a:6650"
            await b.release(b.bundle_path(topic))
            with pytest.raises(NotOwnerError, match="just unloaded here"):
                await b.check(topic)
            owner, owned = await a.lookup(topic)  # a owns a bundle, b none: b is named
            assert (owner.id, owned) == ("b:6650", False)
            owner, owned = await b.lookup(topic, authoritative=True)
            assert (owner.id, owned) == ("b:6650", True)
            await b.check(topic)  # its own now: served
        finally:
            for o in (a, b):
                o.close()
            for m in metas:
                await m.aclose()

    asyncio.run(run())
