"""Streaming queries of one process start one at a time, each until Spark has made its
sources: Spark 4.3's Python streaming source writes into a map that every query shares, and
two sources made at once corrupted it for good (every later task of every view failed "Task
not serializable", caused by "Illegal size 5 of collection, expected 7"; seen in full runs
when two views resumed together after a restart). Spark's query is a stand-in here: what is
checked is the turn-taking; the views' restart tests run it end to end."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from magnetar.views.session import INITIALIZING, start_streaming


class Query:
    """Reports Spark's initialising statuses for ``init_s``, then a running one."""

    def __init__(self, log: list[str], name: str, init_s: float, dies: bool = False) -> None:
        self.log, self.name, self.dies = log, name, dies
        self.ready_at = time.monotonic() + init_s

    @property
    def isActive(self) -> bool:  # Spark's name
        return not (self.dies and time.monotonic() >= self.ready_at)

    @property
    def status(self) -> dict[str, Any]:
        if time.monotonic() < self.ready_at:
            return {"message": INITIALIZING[1]}
        self.log.append(f"{self.name} ready")
        return {"message": "Waiting for data to arrive"}


class Writer:
    def __init__(self, log: list[str], name: str, init_s: float, dies: bool = False) -> None:
        self.log, self.name, self.init_s, self.dies = log, name, init_s, dies

    def start(self) -> Query:
        self.log.append(f"{self.name} start")
        return Query(self.log, self.name, self.init_s, self.dies)


def test_a_query_starts_only_after_the_one_before_made_its_sources() -> None:
    log: list[str] = []
    writers = [Writer(log, f"q{i}", 0.2) for i in range(3)]
    threads = [threading.Thread(target=start_streaming, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    starts = [i for i, line in enumerate(log) if line.endswith("start")]
    assert len(starts) == 3
    for before, after in itertools.pairwise(starts):
        # every start after the first comes once the previous query reported ready
        assert log[after - 1].endswith("ready") and log[before].split()[0] in log[after - 1]


def test_a_query_that_dies_while_initialising_frees_the_turn() -> None:
    log: list[str] = []
    dead = start_streaming(Writer(log, "dead", 0.05, dies=True))
    assert not dead.isActive
    assert start_streaming(Writer(log, "next", 0.0)).isActive


def test_a_source_slower_than_the_timeout_frees_the_turn() -> None:
    log: list[str] = []
    slow = start_streaming(Writer(log, "slow", 60.0), timeout=0.1)
    assert slow.status["message"] in INITIALIZING  # still initialising: the turn was freed
    assert start_streaming(Writer(log, "next", 0.0)).isActive
