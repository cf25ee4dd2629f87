"""Tier 3: object stores, the offloader (closed segment → Parquet + manifest) and the reader
of offloaded segments."""

from magnetar.tier.errors import (
    ObjectNotFoundError,
    ObjectStoreUnavailableError,
    OffloadVerificationError,
    TierError,
    UnsafeKeyError,
    UnsupportedEntryFormatError,
)
from magnetar.tier.object_store import (
    LocalObjectStore,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
)
from magnetar.tier.offloader import Manifest, Offloader, key_of, manifest_key, object_key
from magnetar.tier.reader import OffloadedReader


class Tier:
    """The object store with its offloader and reader, as the managed ledger uses them."""

    def __init__(self, store: ObjectStore, *, row_group_rows: int = 100_000) -> None:
        self.store = store
        self.offloader = Offloader(store, row_group_rows=row_group_rows)
        self.reader = OffloadedReader(store)

    def close(self) -> None:
        self.reader.close()


__all__ = [
    "LocalObjectStore",
    "Manifest",
    "ObjectNotFoundError",
    "ObjectStore",
    "ObjectStoreUnavailableError",
    "OffloadVerificationError",
    "OffloadedReader",
    "Offloader",
    "S3ObjectStore",
    "Tier",
    "TierError",
    "UnsafeKeyError",
    "UnsupportedEntryFormatError",
    "key_of",
    "manifest_key",
    "object_key",
    "open_object_store",
]
