"""Tier 4: the managed ledger — one partition's ordered segments, wherever they live.

Nothing above this package knows whether an entry sits in the local storage engine or (in a
later step) on remote storage nodes or in the object store: it asks a :class:`ManagedLedger`,
opened through a :class:`LedgerFactory`, and reads segments as :class:`SegmentView` values.
"""

from magnetar.ledger.factory import LedgerFactory
from magnetar.ledger.managed_ledger import LedgerStorage, ManagedLedger
from magnetar.storage import OffsetOutOfRangeError, SegmentState
from magnetar.storage import SegmentInfo as SegmentView
from magnetar.storage.errors import (
    CorruptionError,  # a read met damaged data
    InvalidEntryError,  # an append's values cannot be stored (bad input, nothing failed)
    SegmentChangedError,  # update_segment(expect=...) refused
    StorageError,  # an append failed in storage
)
from magnetar.tier import ValueSchema  # what types a topic's Iceberg table (ManagedLedger.offload)

__all__ = [
    "CorruptionError",
    "InvalidEntryError",
    "LedgerFactory",
    "LedgerStorage",
    "ManagedLedger",
    "OffsetOutOfRangeError",
    "SegmentChangedError",
    "SegmentState",
    "SegmentView",
    "StorageError",
    "ValueSchema",
]
