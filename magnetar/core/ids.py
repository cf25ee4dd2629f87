"""Message ids and offsets (DESIGN.md decision 1).

Every partition numbers its messages 0, 1, 2, ... (int64): these offsets are Kafka's
offsets. A Pulsar ``MessageId`` is (ledger id = segment id, entry id = index of the entry
inside that segment, batch index). The mapping between them needs the segment list, so it
lives in the managed ledger; this module only holds the value types.
"""

from __future__ import annotations

from magnetar.core.values import value_class

EARLIEST_LEDGER = -1
LATEST_LEDGER = (1 << 63) - 1


@value_class(order=True)
class MessageId:
    """A Pulsar message id; ``batch_index`` is -1 when the entry is not a batch."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1
    partition: int = -1

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id == EARLIEST_LEDGER and self.entry_id == EARLIEST_LEDGER

    @property
    def is_latest(self) -> bool:
        return self.ledger_id == LATEST_LEDGER and self.entry_id == LATEST_LEDGER


EARLIEST = MessageId(EARLIEST_LEDGER, EARLIEST_LEDGER)
LATEST = MessageId(LATEST_LEDGER, LATEST_LEDGER)
