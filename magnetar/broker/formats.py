"""Entry formats, as the broker sees them: see :mod:`magnetar.core.formats`."""

from magnetar.core.formats import (
    KAFKA,
    PULSAR,
    RAW,
    EntryFormat,
    MessageRow,
    Sequence,
    key_of,
    register,
    sequence_of,
)

__all__ = [
    "KAFKA",
    "PULSAR",
    "RAW",
    "EntryFormat",
    "MessageRow",
    "Sequence",
    "key_of",
    "register",
    "sequence_of",
]
