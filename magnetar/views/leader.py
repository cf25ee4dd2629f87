"""Which broker runs each view: one leader per view, and the epoch it writes with.

A standalone leads every view itself at epoch 0 (:class:`Alone`). With several brokers on
ZooKeeper (:class:`ViewLeaders`) each view has one leader at a time:

- ``/views-leaders/{name}``: an ephemeral node ``{"broker", "http", "epoch"}`` held by the
  leader's ZooKeeper session. Whoever creates it leads; it vanishes with the session.
- ``/views-epochs/{name}``: a counter raised (compare-and-set) by each new leader, so epochs
  only grow, across brokers and restarts, and survive the view being deleted and created
  again.

Both paths are kept by the broker's :class:`~magnetar.broker.records.Leases`.

The new leader fences the view's store at its epoch before its query starts
(:meth:`~magnetar.views.stores.base.StateStore.fence`): from then on a commit by any older
leader — one frozen past its session, or cut off from ZooKeeper but not from the store — is
refused, so no event is applied twice. The store, not ZooKeeper, is where the fence holds:
a broker cannot know its session is gone, but the store sees the epoch of every commit.

A view nobody leads is taken by its preferred broker (the highest rendezvous hash of view
and broker id among live brokers, which spreads views over brokers) at once, and by any
broker after :data:`PATIENCE_S`, or at once by a broker asked about it over the API.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.records import Leases

log = logging.getLogger(__name__)
CHECK_S = 1.0  # how often a broker looks for views nobody leads
PATIENCE_S = 3.0  # after this long without a leader, any broker takes a view


@dataclass(frozen=True)
class Leader:
    broker: str
    http: str
    epoch: int
    https: str = ""  # its HTTPS address, when it serves one

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "http": self.http, "https": self.https,
                "epoch": self.epoch}  # fmt: skip


class Alone:
    """A standalone: this node leads every view, at epoch 0, always."""

    clustered = False

    def epoch(self, name: str) -> int | None:
        return 0

    async def leader(self, name: str) -> Leader | None:
        return None

    async def acquire(self, name: str) -> int | None:
        return 0

    async def release(self, name: str) -> None:
        return None

    async def preferred(self, name: str) -> bool:
        return True

    def close(self) -> None:
        return None


class ViewLeaders:
    """Leadership of views among the brokers registered in ZooKeeper; see the module."""

    clustered = True

    def __init__(
        self,
        leases: Leases,  # the broker's LeaseKind.VIEWS
        me: Any,
        brokers: Callable[[], Any],
        on_lost: Callable[[], None],
    ) -> None:
        self.leases = leases
        self.me = me  # BrokerInfo: id and http
        self._brokers = brokers  # async () -> live BrokerInfos
        self._on_lost = on_lost
        self.led: dict[str, int] = {}  # view → the epoch this broker leads it at
        self._stop_session = leases.on_session_lost(self._session_lost)

    def _session_lost(self) -> None:
        if self.led:
            log.warning(
                "broker %s lost its ZooKeeper session: it stops leading %d view(s)",
                self.me.id,
                len(self.led),
            )
            self.led.clear()
            self._on_lost()

    def epoch(self, name: str) -> int | None:
        return self.led.get(name)

    async def leader(self, name: str) -> Leader | None:
        found = await self.leases.holder(name)
        if found is None:
            return None
        return Leader(found["broker"], found["http"], int(found["epoch"]), found.get("https") or "")

    async def acquire(self, name: str) -> int | None:
        """Lead ``name`` if nobody does: its epoch, or None when another broker leads it."""
        epoch = await self.leases.claim(
            name, {"broker": self.me.id, "http": self.me.http, "https": self.me.https or ""}
        )
        if epoch is None:
            return None
        self.led[name] = epoch
        log.warning("broker %s leads view %s now, at epoch %d", self.me.id, name, epoch)
        return epoch

    async def release(self, name: str) -> None:
        """Stop leading ``name`` (its query already stopped): the next broker takes it."""
        if self.led.pop(name, None) is None:
            return
        await self.leases.release(name, "broker", self.me.id)

    async def preferred(self, name: str) -> bool:
        """Whether this broker is the one ``name`` should run on: the highest rendezvous hash
        among the live brokers."""
        ids = [b.id for b in await self._brokers()] or [self.me.id]
        return max(ids, key=lambda b: hashlib.sha256(f"{name}\0{b}".encode()).digest()) == (
            self.me.id
        )

    def close(self) -> None:
        self._stop_session()
