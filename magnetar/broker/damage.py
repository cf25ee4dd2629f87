"""What a subscription does when its next entry is damaged.

The Pulsar protocol has no command that pushes a read error to a consumer, so a subscription
whose next entry fails its checksum cannot tell its consumers. Pulsar's answer is the broker
setting ``autoSkipNonRecoverableData``, here ``auto_skip_non_recoverable_data``:

- off (the default): the subscription waits at the damage. Its stats name the position
  (``blockedAtDamagedPosition``), ``magnetar_subscription_blocked_on_damaged_data`` is 1, and
  the log says once per position what to do. Nothing is lost: once the data is restored
  (or the setting turned on) it goes on from there.
- on: the damaged entry, and what cannot be located after it in its segment, is skipped:
  acknowledged for this subscription as Pulsar's cursor skips a non-recoverable ledger,
  counted (``msgSkippedAsDamaged``, ``magnetar_subscription_damaged_skipped_total``) and
  logged once per skip.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.core.entries import Entry
from magnetar.ledger import CorruptionError

if TYPE_CHECKING:
    from magnetar.broker.subscription import Subscription

log = logging.getLogger(__name__)

MAX_SKIPS_PER_READ = 16  # damaged spots passed in one read before dispatch yields


class DamageGuard:
    """Reads new entries for one subscription, skipping or waiting at damaged ones."""

    def __init__(self) -> None:
        self.blocked_at: int | None = None  # the offset dispatch waits at (skipping off)
        self.skipped = 0  # messages skipped as damaged, since loaded
        self._told: set[int] = set()  # positions already logged

    async def read(self, sub: Subscription, budget: int) -> list[Entry]:
        """Entries from ``sub.read_position`` (moved past damage when skipping is on); []
        when waiting at damage."""
        for _ in range(MAX_SKIPS_PER_READ):
            start = sub.read_position
            try:
                entries = await sub.ledger.read(start, max_entries=budget)
            except CorruptionError as e:
                if not sub.ledger.auto_skip_non_recoverable_data:
                    self._wait(sub, start, e)
                    return []
                await self._skip(sub, start, e)
                continue
            if self.blocked_at is not None:
                log.warning(
                    "subscription %s of %s reads again past offset %d",
                    sub.name,
                    sub.ledger.name,
                    self.blocked_at,
                )
                self.blocked_at = None
            return entries
        sub.kick()  # skipped a run of damaged entries: go on reading after this round
        return []

    def _wait(self, sub: Subscription, start: int, error: CorruptionError) -> None:
        self.blocked_at = start
        if start in self._told:
            return
        self._told.add(start)
        log.error(
            "subscription %s of %s waits at offset %d: %s Its consumers get nothing past it. "
            "Restore the data, or start the broker with --auto-skip-non-recoverable-data true "
            "to skip damaged entries (lost to subscriptions); 'magnetar admin topics check "
            "TOPIC' lists the damage",
            sub.name,
            sub.ledger.name,
            start,
            error,
        )

    async def _skip(self, sub: Subscription, start: int, error: CorruptionError) -> None:
        end = await sub.ledger.next_readable(start)
        lost = end - start - sub.cursor.acked_count(start, end)
        self.skipped += lost
        sub.cursor.ack_range(start, end)
        sub.read_position = max(sub.read_position, end)
        if sub.store is not None:
            sub.store.changed()
        log.warning(
            "subscription %s of %s skips offsets %d..%d (%d messages), damaged: %s "
            "(auto_skip_non_recoverable_data is on)",
            sub.name,
            sub.ledger.name,
            start,
            end - 1,
            lost,
            error,
        )
