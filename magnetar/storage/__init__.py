"""Tier 2: the storage node's engine (BookKeeper's role, seed 004).

Journal with group commit and CRC32C, segment files with sparse offset and time indexes,
tail cache, recovery. It knows partitions by name and nothing of topics, protocols or
brokers. It sits above ``magnetar.meta``, which holds its segment lists and checkpoints.
"""

from magnetar.core.entries import Entry
from magnetar.storage.config import StorageSettings
from magnetar.storage.engine import EngineStats, StorageEngine
from magnetar.storage.errors import (
    CorruptionError,
    DiskFullError,
    InvalidEntryError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    SegmentNotLocalError,
    StorageError,
    TooManyOpenFilesError,
    WriteFailedError,
)
from magnetar.storage.segment import SegmentInfo, SegmentState

__all__ = [
    "CorruptionError",
    "DiskFullError",
    "EngineStats",
    "Entry",
    "InvalidEntryError",
    "OffsetOutOfRangeError",
    "PartitionNotFoundError",
    "SegmentInfo",
    "SegmentNotLocalError",
    "SegmentState",
    "StorageEngine",
    "StorageError",
    "StorageSettings",
    "TooManyOpenFilesError",
    "WriteFailedError",
]
