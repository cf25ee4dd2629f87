"""Load shedding: the cluster's leader broker moves bundles off overloaded brokers.

Placement (:mod:`.ownership`) puts a new bundle on the least loaded live broker, but a bundle
stays where it was placed: a broker that joins later, or one whose topics grew, is never
relieved. Pulsar's load manager sheds: its leader broker unloads bundles from brokers loaded
well above the others, and the next lookup places them again. Magnetar does the same with
the placement's own measure of load (``bundles + topics / 100 + msgs/s / 10,000``):

- One broker leads the cluster's load balancing: it holds the ephemeral
  ``/loadbalance/leader`` (taken by any broker when free, Pulsar's leader election).
- Every ``load_balancer_shedding_interval_s`` the leader compares the live brokers' loads.
  When the most loaded broker exceeds the least loaded by at least :data:`MARGIN` (two
  bundles' worth: moving one bundle cannot turn the imbalance around) and owns at least two
  bundles, it unloads one of that broker's bundles (graceful, as ``namespaces unload``:
  clients reconnect and look the bundle up again, which places it on the least loaded).
- A bundle unloaded by shedding is not shed again for ``load_balancer_shedding_grace_s``
  (Pulsar's ``loadBalancerSheddingGracePeriodMinutes``): no bundle ping-pongs between brokers.
- One bundle per round, so the loads are measured again between moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from magnetar.broker.ownership import BUNDLES, BrokerInfo, LoadReport, Ownership
from magnetar.meta.errors import NodeExistsError

log = logging.getLogger(__name__)
LEADER = "/loadbalance/leader"
MARGIN = 2.0  # load units (a bundle counts one) between the most and least loaded broker

# asks ``broker`` to unload ``tenant/namespace/bundle`` (its admin REST)
Unload = Callable[[BrokerInfo, str, str, str], Awaitable[None]]


class ClusterLeader:
    """Whether this broker leads the cluster's background duties (shedding, auditing):
    it holds ``/loadbalance/leader`` while its ZooKeeper session lives."""

    def __init__(self, ownership: Ownership) -> None:
        self.ownership = ownership

    async def check(self) -> bool:
        """True when this broker leads (taking the lead if nobody holds it)."""
        meta, me = self.ownership.meta, self.ownership.me
        node = await meta.get(LEADER)
        if node is None:
            with contextlib.suppress(NodeExistsError):
                await meta.create_ephemeral(LEADER, me.id.encode())  # type: ignore[attr-defined]
                log.warning("broker %s leads the cluster's load balancing now", me.id)
            node = await meta.get(LEADER)
        return node is not None and node.value.decode() == me.id


@dataclass(frozen=True)
class Move:
    source: BrokerInfo
    tenant: str
    namespace: str
    bundle: str


class Shedder:
    """See the module docstring."""

    def __init__(
        self,
        leader: ClusterLeader,
        unload: Unload,
        *,
        interval_s: float,
        grace_s: float,
    ) -> None:
        self.ownership = leader.ownership
        self.leader = leader
        self._unload = unload
        self.interval_s = interval_s
        self.grace_s = grace_s
        self._moved: dict[str, float] = {}  # bundle path → when shedding unloaded it
        self.unloads = 0  # bundles shed by this broker while it led
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="magnetar-shedder")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                if await self.leader.check():
                    await self.shed_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # cut off, a broker going away: the next round again
                log.warning("load shedding round failed: %s", e)

    async def shed_once(self) -> Move | None:
        """Unload one bundle from the most loaded broker if the loads call for it."""
        move = await self.plan()
        if move is None:
            return None
        path = f"{BUNDLES}/{move.tenant}/{move.namespace}/{move.bundle}"
        log.warning(
            "load shedding: unloading bundle %s/%s/%s from broker %s",
            move.tenant, move.namespace, move.bundle, move.source.id,
        )  # fmt: skip
        self._moved[path] = time.monotonic()
        await self._unload(move.source, move.tenant, move.namespace, move.bundle)
        self.unloads += 1
        return move

    async def plan(self) -> Move | None:
        """The bundle to move now, or None (balanced, or nothing movable)."""
        brokers = {b.id: b for b in await self.ownership.brokers()}
        if len(brokers) < 2:
            return None
        owned = await self._owned(set(brokers))
        reports = await self.ownership.loads()

        def load(broker: str) -> float:
            return len(owned[broker]) + reports.get(broker, LoadReport()).weight()

        most = max(brokers, key=lambda b: (load(b), b))
        least = min(brokers, key=lambda b: (load(b), b))
        if load(most) - load(least) < MARGIN or len(owned[most]) < 2:
            return None
        now = time.monotonic()
        for path in sorted(owned[most]):
            if now - self._moved.get(path, -self.grace_s) >= self.grace_s:
                tenant, namespace, bundle = path.removeprefix(BUNDLES + "/").split("/")
                return Move(brokers[most], tenant, namespace, bundle)
        return None

    async def _owned(self, live: set[str]) -> dict[str, list[str]]:
        """Bundle paths per live broker, read from the ownership nodes."""
        meta = self.ownership.meta
        out: dict[str, list[str]] = {b: [] for b in live}
        for tenant in await meta.list_children(BUNDLES):
            for ns in await meta.list_children(f"{BUNDLES}/{tenant}"):
                for bundle in await meta.list_children(f"{BUNDLES}/{tenant}/{ns}"):
                    path = f"{BUNDLES}/{tenant}/{ns}/{bundle}"
                    node = await meta.get(path)
                    if node is not None and node.value:
                        owner = BrokerInfo.from_bytes(node.value).id
                        if owner in out:
                            out[owner].append(path)
        return out
