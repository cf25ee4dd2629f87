"""Tier 1: the metadata store. Every piece of metadata goes through :class:`MetadataStore`."""

from magnetar.meta.base import MetadataStore, Notification, SessionState, Stat, Versioned
from magnetar.meta.counters import reserve_block
from magnetar.meta.errors import BadVersionError, MetadataError, NodeExistsError, NotFoundError

__all__ = [
    "BadVersionError",
    "MetadataError",
    "MetadataStore",
    "NodeExistsError",
    "NotFoundError",
    "Notification",
    "SessionState",
    "Stat",
    "Versioned",
    "open_metadata_store",
    "reserve_block",
]


def open_metadata_store(url: str) -> MetadataStore:
    """``sqlite:///path/to/file.db`` or ``memory:`` (tests)."""
    from magnetar.meta.factory import open_store

    return open_store(url)
