"""What the clients were told, message by message, for the ingest property test.

Producer threads hand messages to their client and record each callback here; the test's
thread counts disruptions (restarts and kills). From this record and what the server holds
at the end, ``test_ingest_property`` checks the ingest contract.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

# Where an acknowledged message was stored, as its receipt says: Pulsar (partition, ledger,
# entry, batch index); Kafka (partition, offset). None: the receipt carried −1 (Pulsar
# −1:−1, Kafka offset −1 / invalid), the broker's answer to a duplicate.
Position = tuple[int, ...] | None


@dataclass(frozen=True)
class ProducerSpec:
    """One producer of a round, drawn from the seed."""

    tag: str  # prefix of its payloads: "r<round>p<slot>"
    protocol: str  # "pulsar" or "kafka"
    topic: str  # short name in public/default
    count: int
    named: bool = False  # Pulsar: gives its own name
    batched: bool = False  # Pulsar: batching on
    idempotent: bool = False  # Kafka: enable.idempotence
    dedup: bool = False  # the namespace's deduplication during its round
    late: bool = False  # starts mid-round: after the restart or kill, if the round has one

    @property
    def exactly_once(self) -> bool:
        """The contract: Pulsar with deduplication on, or idempotent Kafka, store each
        message once; the others are at-least-once."""
        return self.idempotent if self.protocol == "kafka" else self.dedup

    @property
    def ordered(self) -> bool:
        """Per-partition order is promised by Pulsar producers (resends go out in order)
        and idempotent Kafka producers; plain Kafka with 5 requests in flight may reorder
        on a retry."""
        return self.protocol == "pulsar" or self.idempotent

    def payload(self, index: int) -> bytes:
        return f"{self.tag}-{index:05d}".encode()

    def describe(self) -> str:
        late = ", late" if self.late else ""
        if self.protocol == "kafka":
            return f"{self.tag}:kafka(idempotent={self.idempotent}{late})->{self.topic}"
        return (
            f"{self.tag}:pulsar(named={self.named}, batched={self.batched}, "
            f"dedup={self.dedup}{late})->{self.topic}"
        )


@dataclass(frozen=True)
class Outcome:
    ok: bool
    position: Position = None
    error: str = ""


@dataclass
class Handed:
    """A message handed to its client: by whom, and how many disruptions had happened."""

    spec: ProducerSpec
    epoch: int


@dataclass
class OutcomeBook:
    """Every message handed to a client and every callback it got; thread-safe."""

    window: int
    changed: threading.Condition = field(default_factory=threading.Condition)
    handed: dict[bytes, Handed] = field(default_factory=dict)
    outcomes: dict[bytes, list[Outcome]] = field(default_factory=dict)
    pending: Counter[str] = field(default_factory=Counter)  # per producer tag
    acked: int = 0
    disruptions: int = 0  # raised by the test's thread *after* each kill or stop

    def hand(self, spec: ProducerSpec, payload: bytes) -> None:
        """Record ``payload`` as handed over; first wait until ``spec`` has fewer than
        ``window`` messages without an outcome (keeps the stream going across a kill)."""
        with self.changed:
            room = self.changed.wait_for(lambda: self.pending[spec.tag] < self.window, 120)
            assert room, f"{spec.describe()}: no callback for 120 s"
            self.handed[payload] = Handed(spec, self.disruptions)
            self.pending[spec.tag] += 1

    def done(self, payload: bytes, outcome: Outcome) -> None:
        with self.changed:
            self.outcomes.setdefault(payload, []).append(outcome)
            self.pending[self.handed[payload].spec.tag] -= 1
            self.acked += outcome.ok
            self.changed.notify_all()

    def wait_for_acks(self, n: int, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.acked >= n, timeout)

    def wait_for_outcomes(self, spec: ProducerSpec, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.pending[spec.tag] == 0, timeout)

    def disrupted(self) -> int:
        """Count a restart or kill that just happened; returns how many messages were
        then awaiting their callback (exposed to a resend)."""
        with self.changed:
            self.disruptions += 1
            return sum(self.pending.values())

    def resendable(self, payload: bytes, round_disruptions: int) -> bool:
        """Could the client have sent ``payload`` twice? Only if a disruption came after it
        was handed over (the clients resend only what was pending at a reconnect)."""
        return self.handed[payload].epoch < round_disruptions
