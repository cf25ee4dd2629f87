"""The elected auditor: under-replicated ledgers of topics no broker serves.

Each broker re-replicates the closed ledgers of the partitions it writes (``audit`` in
:mod:`.replicated`): the broker that owns a topic is the only one that may change its
segment list. A topic nobody serves — an idle topic whose bundle was unloaded, or whose
owner died and no client asked for it since — would keep a lost node's ledgers at fewer
copies than its write quorum until someone next used it. BookKeeper's auditor is elected
among bookies to find exactly these. Here the broker leading the cluster's background
duties (``/loadbalance/leader``) looks, every round, for partitions whose closed ledgers
name a storage node gone past the grace period and whose bundle has no owner, and loads
them: it becomes their owner (taking the bundle, fencing and recovering as any new owner),
so its own audit re-replicates them, and nothing else ever writes their segment list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from magnetar.cluster.replicated import ROOT, Ledger, ReplicatedStorage
from magnetar.storage import SegmentState

log = logging.getLogger(__name__)


async def unserved_under_replicated(store: ReplicatedStorage) -> list[str]:
    """Partitions (``tenant/ns/topic``) not loaded here whose closed ledgers name a storage
    node unregistered for longer than the re-replication grace."""
    grace = store.settings.rereplication_grace_s
    found = []
    for child in await store.meta.list_children(ROOT):
        name = unquote(child)
        if store.has_partition(name):
            continue  # this broker's own audit sees it
        node = await store.meta.get(f"{ROOT}/{child}")
        if node is None or not node.value:
            continue
        for raw in json.loads(node.value).get("ledgers", []):
            ledger = Ledger.from_json(raw)
            if ledger.info.state is SegmentState.OPEN or not ledger.info.local:
                continue
            named = {n for _, nodes in ledger.ensembles for n in nodes}
            if any(store.nodes.gone_for(n) > grace for n in named):
                found.append(name)
                break
    return found


class OrphanAuditor:
    """On the cluster's leader, every ``interval`` s: load each unserved partition with an
    under-replicated ledger, through ``load`` (the broker's own topic loading)."""

    def __init__(
        self,
        store: ReplicatedStorage,
        is_leader: Callable[[], Awaitable[bool]],
        unowned: Callable[[str], Awaitable[bool]],
        load: Callable[[str], Awaitable[None]],
        interval: float,
    ) -> None:
        self.store = store
        self._is_leader = is_leader
        self._unowned = unowned  # whether no broker owns the partition's bundle
        self._load = load
        self.interval = interval
        self.adopted = 0  # partitions loaded here to be re-replicated
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="magnetar-orphan-auditor")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                if await self._is_leader():
                    await self.round()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # cut off, a partition being deleted: the next round
                log.warning("auditing unserved topics failed: %s", e)

    async def round(self) -> list[str]:
        adopted = []
        for name in await unserved_under_replicated(self.store):
            if not await self._unowned(name):
                continue  # its owner audits it
            log.warning(
                "auditor: %s has ledgers on a lost storage node and no broker serves it; "
                "loading it here to copy them back",
                name,
            )
            await self._load(name)
            adopted.append(name)
            self.adopted += 1
        return adopted
