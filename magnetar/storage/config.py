"""What the storage engine reads of a node's settings, and nothing more.

The engine, its recovery and its catalog take a :class:`StorageSettings`, built once from
the node's :class:`~magnetar.core.config.Settings` by :meth:`StorageSettings.of`. A storage
node, a test or a benchmark can so say exactly what the engine depends on, and a setting
added for brokers or views never reaches storage by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from magnetar.core.config import FsyncPolicy, Settings

_DEFAULT = Settings()


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """The engine's settings; each means what the field of the same name in Settings does."""

    journal_path: Path
    ledger_path: Path
    fsync: FsyncPolicy = field(default_factory=lambda: FsyncPolicy("always"))
    journal_max_bytes: int = _DEFAULT.journal_max_bytes
    segment_max_bytes: int = _DEFAULT.segment_max_bytes
    segment_max_age: float = _DEFAULT.segment_max_age
    segment_max_entries: int = _DEFAULT.segment_max_entries
    index_interval_bytes: int = _DEFAULT.index_interval_bytes
    tail_cache_bytes: int = _DEFAULT.tail_cache_bytes
    max_open_segment_files: int = _DEFAULT.max_open_segment_files

    @classmethod
    def of(cls, settings: Settings) -> StorageSettings:
        """The storage part of a node's settings."""
        return cls(
            journal_path=settings.journal_path,
            ledger_path=settings.ledger_path,
            fsync=settings.fsync,
            journal_max_bytes=settings.journal_max_bytes,
            segment_max_bytes=settings.segment_max_bytes,
            segment_max_age=settings.segment_max_age,
            segment_max_entries=settings.segment_max_entries,
            index_interval_bytes=settings.index_interval_bytes,
            tail_cache_bytes=settings.tail_cache_bytes,
            max_open_segment_files=settings.max_open_segment_files,
        )
