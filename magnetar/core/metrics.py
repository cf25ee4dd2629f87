"""Metric primitives cheap enough for hot paths: a fixed-bucket histogram.

Recording is one ``bisect`` and two additions, with no lock: each histogram has one writer
(the event loop, or the journal's writer thread), and a reader (a ``/metrics`` scrape) copies
the bucket counts in one step and derives the total from that copy, so what it reports is
always consistent with itself. Turning them into Prometheus text is the HTTP tier's work;
nothing here imports ``prometheus_client``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

# Seconds, from 100 µs (an fsync on fast flash) to 10 s (a stalled disk).
LATENCY_BOUNDS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)
# Counts (entries per group commit), powers of two up to 16384.
SIZE_BOUNDS: tuple[float, ...] = tuple(float(2**i) for i in range(15))


class Histogram:
    """Observations counted into buckets with fixed upper bounds (inclusive, as Prometheus's
    ``le``), plus their sum. One writer at a time; any number of readers."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """Prometheus buckets ``[(le, observations <= le), ..., ("+Inf", total)]`` and the
        sum, from one copy of the counts."""
        counts, total = list(self.counts), self.sum
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*map(_le, self.bounds), "+Inf"), counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out, total

    @classmethod
    def merged(cls, parts: Iterable[Histogram], bounds: Sequence[float]) -> Histogram:
        """One histogram adding up ``parts`` (which must share ``bounds``)."""
        out = cls(bounds)
        for h in parts:
            for i, n in enumerate(list(h.counts)):
                out.counts[i] += n
            out.sum += h.sum
        return out


def _le(bound: float) -> str:
    """A bound as Prometheus clients write ``le``: ``1.0``, ``0.005``, ``+Inf``."""
    return repr(float(bound))
