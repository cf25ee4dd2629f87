"""The state store interface and its contract.

A store holds *datasets*: one per view version (``orders__v1``) or as-of view
(``orders__at_t1700000000000``). A dataset is a map from key text (see
:func:`magnetar.views.model.key_text`) to a row (a JSON object), plus a position: the last
batch id committed and the source offsets the rows reflect.

Contract (every backend runs ``tests/views/test_store_contract.py``):

- :meth:`commit` applies a batch's upserts and deletes *and* records its batch id and offsets
  in one transaction: when it returns True all of it is durable, when it raises none of it
  happened. A batch id at or below the recorded one is a replay: it returns False and changes
  nothing, which is what makes a replayed Spark micro-batch harmless (exactly once).
- Leader epochs fence old writers (several brokers, one leader per view): :meth:`fence`
  raises the dataset's epoch; a :meth:`commit` with a lower epoch than the stored one raises
  :class:`~magnetar.views.errors.ViewFencedError` and changes nothing. A broker that led the
  view before and still runs its query can therefore never write after the new leader fenced.
- :meth:`alias` points the stable name of a view at one of its datasets, atomically for
  readers (a new version swaps in whole).
- Calls are thread-safe: Spark's batch callbacks and HTTP reads share one store object.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any

from magnetar.views.model import Offsets, Position


def dataset_name(view: str, version: int | None = None, label: str | None = None) -> str:
    """``orders__v3`` for a version, ``orders__at_<label>`` for an as-of view."""
    return f"{view}__at_{label}" if label is not None else f"{view}__v{version}"


class StateStore(abc.ABC):
    """A backend holding view datasets; see the module docstring for the contract."""

    url: str

    @abc.abstractmethod
    def position(self, dataset: str) -> Position | None:
        """The dataset's last commit, or None when nothing was ever committed."""

    @abc.abstractmethod
    def commit(
        self,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str] = (),
        epoch: int = 0,
    ) -> bool:
        """Apply one batch atomically with its position; False (and no change) for a replay;
        ViewFencedError (no change) when the stored epoch is above ``epoch``."""

    @abc.abstractmethod
    def fence(self, dataset: str, epoch: int) -> Position | None:
        """Raise the dataset's leader epoch to ``epoch`` and return its position (None when
        nothing was committed), in one transaction; ViewFencedError if the stored epoch is
        above ``epoch``. After it returns, no commit with a lower epoch succeeds."""

    @abc.abstractmethod
    def get_many(self, dataset: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The rows of those keys that exist."""

    @abc.abstractmethod
    def scan(self, dataset: str, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` rows, in key order."""

    @abc.abstractmethod
    def count(self, dataset: str) -> int:
        """How many rows the dataset holds."""

    @abc.abstractmethod
    def alias(self, view: str, dataset: str) -> None:
        """Make ``view`` (its stable name in the store) read ``dataset``; durable on return."""

    @abc.abstractmethod
    def drop(self, dataset: str) -> None:
        """Remove the dataset's rows and position; missing datasets are ignored."""

    @abc.abstractmethod
    def drop_alias(self, view: str) -> None:
        """Remove the stable name; missing ones are ignored."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; later calls fail."""

    def get(self, dataset: str, key: str) -> dict[str, Any] | None:
        return self.get_many(dataset, [key]).get(key)
