"""Durable records, id blocks and leases of the areas above the broker, in the metadata store.

Protocol servers, http and views never build metadata paths nor hold the metadata store
(tests/test_tiers.py): each kind of record they keep has one root here (STYLE 11), and they
get a :class:`RecordStore`, :class:`Leases` or an id block for it from the :class:`Broker`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.meta import MetadataStore
from magnetar.meta.base import SessionState
from magnetar.meta.counters import reserve_block
from magnetar.meta.errors import BadVersionError, NodeExistsError, NotFoundError

# Re-exported for the users of versioned writes: what a compare-and-set put or delete raises.
__all__ = [
    "BadVersionError",
    "IdBlock",
    "LeaseKind",
    "Leases",
    "NodeExistsError",
    "NotFoundError",
    "RecordKind",
    "RecordStore",
    "StoredRecord",
    "reserve_ids",
]


class RecordKind(enum.Enum):
    """Where each kind of record lives (the paths are stable: stored data names them)."""

    VIEWS = "/views"  # view definitions (magnetar.views)
    KAFKA_TRANSACTIONS = "/kafka/transactions"  # Kafka transactional ids' state
    KAFKA_TXN_OFFSETS = "/kafka/txn-offsets"  # group offsets staged in a transaction


class IdBlock(enum.Enum):
    """Counters handing out blocks of numbers no caller ever got before."""

    KAFKA_PRODUCER_IDS = "/kafka/producer-id-block"


class LeaseKind(enum.Enum):
    """Leases with epochs: (the holders' root, the epoch counters' root)."""

    VIEWS = ("/views-leaders", "/views-epochs")


@dataclass(frozen=True, slots=True)
class StoredRecord:
    key: str
    value: bytes
    version: int  # for a compare-and-set put or delete


class RecordStore:
    """The records of one kind: ``key`` → bytes, with versioned writes. A key may hold ``/``
    (a record under another one's name); callers quote what must not."""

    def __init__(self, meta: MetadataStore, kind: RecordKind) -> None:
        self._meta = meta
        self._root = kind.value

    async def keys(self) -> list[str]:
        return await self._meta.list_children(self._root)

    async def get(self, key: str) -> StoredRecord | None:
        node = await self._meta.get(f"{self._root}/{key}")
        return None if node is None else StoredRecord(key, node.value, node.stat.version)

    async def put(self, key: str, value: bytes, *, expected_version: int | None = None) -> int:
        """Write ``value`` (durable when this returns); its new version. With
        ``expected_version`` only over that version (-1: only if there is none), else
        BadVersionError / NodeExistsError and nothing changes."""
        stat = await self._meta.put(f"{self._root}/{key}", value, expected_version=expected_version)
        return stat.version

    async def delete(self, key: str, *, expected_version: int | None = None) -> None:
        """Remove the record (NotFoundError when there is none; BadVersionError when it is
        not at ``expected_version``)."""
        await self._meta.delete(f"{self._root}/{key}", expected_version=expected_version)


async def reserve_ids(meta: MetadataStore, block: IdBlock, size: int) -> int:
    """The first number of a block of ``size`` no caller ever got before (durable)."""
    return await reserve_block(meta, block.value, size)


class Leases:
    """Named leases among brokers on ZooKeeper: a holder is an ephemeral node that vanishes
    with its session, and each new holder gets an epoch higher than any before it (a
    counter raised by compare-and-set), across brokers, restarts and deletions."""

    def __init__(self, meta: MetadataStore, kind: LeaseKind) -> None:
        self._meta = meta
        self._holders, self._epochs = kind.value

    async def holder(self, name: str) -> dict[str, Any] | None:
        """The holder's record as its claim wrote it, or None when nobody holds ``name``."""
        node = await self._meta.get(f"{self._holders}/{name}")
        return json.loads(node.value) if node is not None and node.value else None

    async def claim(self, name: str, holder: dict[str, Any]) -> int | None:
        """Hold ``name`` if nobody does: its new epoch (also stored as ``holder["epoch"]``),
        or None when another holds it."""
        path = f"{self._holders}/{name}"
        claim = json.dumps({**holder, "epoch": -1}).encode()
        try:
            await self._meta.create_ephemeral(path, claim)  # type: ignore[attr-defined]
        except NodeExistsError:
            return None
        epoch = await self._next_epoch(name)
        body = json.dumps({**holder, "epoch": epoch}).encode()
        await self._meta.put(path, body, expected_version=0)
        return epoch

    async def _next_epoch(self, name: str) -> int:
        path = f"{self._epochs}/{name}"
        while True:
            node = await self._meta.get(path)
            epoch = (int(node.value) if node is not None and node.value else 0) + 1
            try:
                version = -1 if node is None else node.stat.version
                await self._meta.put(path, str(epoch).encode(), expected_version=version)
                return epoch
            except (NodeExistsError, BadVersionError):
                continue  # another holder raised it in between (it lost its claim since)

    async def release(self, name: str, field: str, value: Any) -> None:
        """Give ``name`` up if its holder's ``field`` is ``value`` (this broker holds it)."""
        path = f"{self._holders}/{name}"
        try:
            node = await self._meta.get(path)
            if node is not None and json.loads(node.value).get(field) == value:
                await self._meta.delete(path, expected_version=node.stat.version)
        except NotFoundError:
            return  # gone meanwhile

    def on_session_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when this broker's session ends (its leases with it)."""

        def watch(state: SessionState) -> None:
            if state is SessionState.LOST:
                callback()

        stop: Callable[[], None] = self._meta.on_session(watch)  # type: ignore[attr-defined]
        return stop
