"""Tier 3: object stores, the offloader (closed segment → Parquet + manifest) and the reader
of offloaded segments."""

from magnetar.tier.errors import (
    IcebergCommitError,
    ObjectNotFoundError,
    ObjectStoreUnavailableError,
    OffloadVerificationError,
    TierError,
    UnsafeKeyError,
    UnsupportedEntryFormatError,
)
from magnetar.tier.iceberg import IcebergTables, SegmentFiles, ValueSchema
from magnetar.tier.object_store import (
    LocalObjectStore,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
)
from magnetar.tier.offloader import (
    Manifest,
    Offloader,
    attempt_prefix,
    key_of,
    keys_of,
    manifest_key,
    object_key,
)
from magnetar.tier.reader import OffloadedReader


class Tier:
    """The object store with its offloader and reader, as the managed ledger uses them, and
    the Iceberg tables offloaded segments are registered in (None: no catalog)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        row_group_rows: int = 100_000,
        iceberg: IcebergTables | None = None,
    ) -> None:
        self.store = store
        self.offloader = Offloader(store, row_group_rows=row_group_rows)
        self.reader = OffloadedReader(store)
        self.iceberg = iceberg

    def close(self) -> None:
        self.reader.close()


__all__ = [
    "IcebergCommitError",
    "IcebergTables",
    "LocalObjectStore",
    "Manifest",
    "ObjectNotFoundError",
    "ObjectStore",
    "ObjectStoreUnavailableError",
    "OffloadVerificationError",
    "OffloadedReader",
    "Offloader",
    "S3ObjectStore",
    "SegmentFiles",
    "Tier",
    "TierError",
    "UnsafeKeyError",
    "UnsupportedEntryFormatError",
    "ValueSchema",
    "attempt_prefix",
    "key_of",
    "keys_of",
    "manifest_key",
    "object_key",
    "open_object_store",
]
