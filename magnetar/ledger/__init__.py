"""Tier 4: the managed ledger — one partition's ordered segments, wherever they live.

Nothing above this package knows whether an entry sits in the local storage engine or (in a
later step) on remote storage nodes or in the object store: it asks a :class:`ManagedLedger`.
"""

from magnetar.ledger.managed_ledger import LedgerStorage, ManagedLedger

__all__ = ["LedgerStorage", "ManagedLedger"]
