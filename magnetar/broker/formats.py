"""Entry formats, as the broker sees them: see :mod:`magnetar.core.formats`."""

from magnetar.core.formats import (
    KAFKA,
    PULSAR,
    RAW,
    EntryFormat,
    MessageRow,
    Sequence,
    TransactionMark,
    compaction_keys_of,
    deliver_at_of,
    key_of,
    register,
    sequence_of,
    transaction_of,
)

__all__ = [
    "KAFKA",
    "PULSAR",
    "RAW",
    "EntryFormat",
    "MessageRow",
    "Sequence",
    "TransactionMark",
    "compaction_keys_of",
    "deliver_at_of",
    "key_of",
    "register",
    "sequence_of",
    "transaction_of",
]
