"""A clock that moves only when the test says so (trio's MockClock in spirit): code under test
takes a :class:`magnetar.core.clock.Clock`, tests hand it a :class:`ManualClock` and call
:meth:`advance` instead of sleeping."""

from __future__ import annotations


class ManualClock:
    """Wall-clock and monotonic time, both moved by :meth:`advance` only."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock never goes back")
        self.now += ms
