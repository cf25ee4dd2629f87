"""Errors of the storage engine."""

from __future__ import annotations

from magnetar.core.errors import MagnetarError


class StorageError(MagnetarError):
    """The storage engine failed an operation."""

    code = "storage.error"
    pulsar_error = "PersistenceError"
    kafka_error = "KAFKA_STORAGE_ERROR"


class FencedError(StorageError):
    """Another writer fenced the segment (it recovered the partition after this one was
    thought gone): nothing more may be acknowledged through this writer."""

    code = "storage.fenced"


class SegmentChangedError(StorageError):
    """A conditional change of a segment's record was refused: the record is no longer what
    the caller expected (another owner of the partition changed it meanwhile). Nothing was
    written; the record's current owner decides what happens to the segment."""

    code = "storage.segment_changed"
    http_status = 409


class CorruptionError(StorageError):
    """Stored bytes fail their checksum or structure inside the acknowledged range.

    Raised, never skipped: the file and byte position tell an operator where to look.
    """

    code = "storage.corrupt"
    kafka_error = "CORRUPT_MESSAGE"  # librdkafka surfaces it in poll(); not retried silently

    def __init__(self, path: str, position: int, problem: str) -> None:
        super().__init__(
            f"corrupt data in {path} at byte {position}: {problem}. "
            "Acknowledged data is damaged; restore this file from a replica or backup."
        )
        self.path = path
        self.position = position


class DiskFullError(StorageError):
    """The disk is full: nothing of the failed append was acknowledged. Free space and retry."""

    code = "storage.disk_full"
    retriable = True


class WriteFailedError(StorageError):
    """The write or fsync failed with an I/O error; nothing of the append was acknowledged."""

    code = "storage.write_failed"
    retriable = True


class TooManyOpenFilesError(StorageError):
    """The process is out of file descriptors (EMFILE) even after closing idle segment
    files; nothing was written. Raise the open-file limit or lower the connection caps."""

    code = "storage.too_many_open_files"
    retriable = True


class PartitionNotFoundError(StorageError):
    """No partition of that name exists in this storage engine; create it first."""

    code = "storage.partition_not_found"
    http_status = 404
    pulsar_error = "TopicNotFound"
    kafka_error = "UNKNOWN_TOPIC_OR_PARTITION"


class OffsetOutOfRangeError(StorageError):
    """The offset lies before the first retained offset or after the end of the partition."""

    code = "storage.offset_out_of_range"
    http_status = 400
    pulsar_error = "NotAllowedError"
    kafka_error = "OFFSET_OUT_OF_RANGE"


class SegmentNotLocalError(StorageError):
    """The segment's local files were deleted after an offload: read it from the tier."""

    code = "storage.not_local"

    def __init__(self, message: str, segment_id: int) -> None:
        super().__init__(message)
        self.segment_id = segment_id


class InvalidEntryError(StorageError):
    """An append's values cannot be stored (a timestamp beyond int64, say); nothing was
    written and the same call will fail again."""

    code = "storage.invalid_entry"
    http_status = 400
    pulsar_error = "ChecksumError"  # the one SEND_ERROR that fails that message alone
    kafka_error = "INVALID_RECORD"
