"""The ``MetadataStore`` interface and its contract.

Paths are ``/``-separated strings (``/storage/partitions/p1/segments/7``); values are
bytes. Every node has a version, starting at 0 when created and incremented by each put.

Contract (every backend runs ``tests/meta/test_contract.py``):

- ``put`` with ``expected_version=None`` writes unconditionally (create or overwrite);
  with ``-1`` it creates only if absent (else :class:`NodeExistsError`); with ``n >= 0``
  it overwrites only if the current version is ``n`` (else :class:`BadVersionError`, or
  :class:`NotFoundError` when the node is missing).
- When ``put`` or ``delete`` returns, the change is durable (it survives a crash of the
  process) and visible to every later ``get`` through any handle on the same store.
- Parents are implicit: ``list_children("/a")`` lists the next path component of every
  node under ``/a/``, whether or not ``/a`` itself has a value.
- ``watch(prefix, callback)`` calls ``callback`` after each change of a node at or under
  ``prefix`` made through this handle; it returns a function that cancels the watch.
- ``multi`` applies a list of operations atomically: all or none.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Stat:
    version: int
    created_ms: int
    modified_ms: int


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    stat: Stat


@dataclass(frozen=True, slots=True)
class Notification:
    path: str
    kind: Literal["created", "modified", "deleted"]


class SessionState(enum.Enum):
    """A cluster metadata store's session (ZooKeeper): what owners of ephemeral nodes act on."""

    CONNECTED = "connected"  # the session is alive; ephemeral nodes stand
    SUSPENDED = "suspended"  # cut off; the session may still be alive
    LOST = "lost"  # expired (or cut off past its timeout): its ephemeral nodes are gone


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of :meth:`MetadataStore.multi`: a put (value set) or a delete."""

    path: str
    value: bytes | None = None  # None means delete
    expected_version: int | None = None


Watcher = Callable[[Notification], None]


class MetadataStore(abc.ABC):
    """Versioned key-value tree; see the module docstring for the contract."""

    @abc.abstractmethod
    async def get(self, path: str) -> Versioned | None:
        """The value and stat at ``path``, or None if there is no node."""

    @abc.abstractmethod
    async def put(self, path: str, value: bytes, *, expected_version: int | None = None) -> Stat:
        """Write ``value``; durable when this returns. See the contract for versions."""

    @abc.abstractmethod
    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        """Delete the node (not its children). NotFoundError if missing."""

    @abc.abstractmethod
    async def list_children(self, path: str) -> list[str]:
        """Sorted names of the direct children of ``path``."""

    @abc.abstractmethod
    async def multi(self, ops: Sequence[Op]) -> None:
        """Apply every op atomically, or none (raising the first op's error)."""

    @abc.abstractmethod
    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        """Call ``callback`` on each change at or under ``prefix``; returns the canceller."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the store; later calls raise ClosedError."""

    async def exists(self, path: str) -> bool:
        return await self.get(path) is not None

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything under it; missing nodes are ignored."""
        for child in await self.list_children(path):
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        if await self.exists(path):
            await self.delete(path)

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
