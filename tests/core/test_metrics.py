"""The hot-path histogram and the scrape-time rates, in-process."""

from __future__ import annotations

from magnetar.core.metrics import SIZE_BOUNDS, Histogram
from magnetar.http.metrics import Rates


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 3.0):
        h.observe(v)
    buckets, total = h.cumulative()
    assert buckets == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]  # le is inclusive
    assert total == 4.65
    assert h.count == 5


def test_merged_adds_up_parts() -> None:
    a, b = Histogram(SIZE_BOUNDS), Histogram(SIZE_BOUNDS)
    a.observe(1)
    b.observe(3)
    b.observe(100_000)
    merged = Histogram.merged([a, b], SIZE_BOUNDS)
    assert merged.count == 3 and merged.sum == 100_004
    assert merged.cumulative()[0][-1] == ("+Inf", 3.0)


def test_rates_over_the_window_and_forgotten_series() -> None:
    now = [0.0]
    rates = Rates(window=10, clock=lambda: now[0])
    assert rates.rate("t", (0,)) == (0.0,)  # the first scrape: no history
    now[0] = 5
    assert rates.rate("t", (50,)) == (10.0,)
    now[0] = 20  # the oldest sample left the window: the rate is over the last 15 s
    assert rates.rate("t", (200,)) == (10.0,)
    rates.forget_unseen()
    rates.forget_unseen()  # "t" not asked for since: dropped
    assert rates.rate("t", (300,)) == (0.0,)
