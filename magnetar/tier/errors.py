"""Errors of tiered storage."""

from magnetar.core.errors import MagnetarError


class TierError(MagnetarError):
    """The object store or the offloader failed."""

    code = "tier.error"
    pulsar_error = "PersistenceError"
    kafka_error = "KAFKA_STORAGE_ERROR"


class ObjectNotFoundError(TierError):
    code = "tier.not_found"


class ObjectStoreUnavailableError(TierError):
    """The object store could not be reached or refused the call; retry later."""

    code = "tier.unavailable"
    retriable = True


class UnsafeKeyError(TierError):
    """A key that would resolve outside the object store's root (``..``, an absolute path,
    a symbolic link leading out): refused before anything is read or written. Names are
    checked long before a key is built (magnetar.core.names); this is the second wall."""

    code = "tier.unsafe_key"


class OffloadVerificationError(TierError):
    """The object read back differs from what was written; the segment stays local."""

    code = "tier.verification_failed"
    retriable = True


class UnsupportedEntryFormatError(TierError):
    """A segment holds entries that cannot be split into one Parquet row per message (a
    format with no registered unpacker, or an entry whose message count its payload does
    not match). The segment stays local; offloading it cannot succeed until that changes."""

    code = "tier.unsupported_format"


class IcebergCommitError(TierError):
    """The Iceberg catalog refused or could not take a commit (another writer kept winning,
    or it could not be reached). The segment stays local; the next offload retries."""

    code = "tier.iceberg_commit_failed"
    retriable = True
