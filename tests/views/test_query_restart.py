"""A view's streaming query that dies inside Spark is started again from its checkpoint (at
most MAX_RESTARTS times); one that fails in the view's own batch code is not. The Spark
query is a stand-in here: the fault (a query dying for a reason outside the view) is what
this injects; the end-to-end restart through a real Spark session is in test_resume.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from magnetar.views import runner as runner_module
from magnetar.views.model import Position, ViewState
from magnetar.views.runner import MAX_RESTARTS, ViewRunner


class FakeQuery:
    """awaitTermination raises ``error`` (or returns: a clean stop)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def awaitTermination(self) -> None:  # Spark's name
        if self.error is not None:
            raise self.error


def _runner(queries: list[FakeQuery], monkeypatch: pytest.MonkeyPatch) -> ViewRunner:
    """A ViewRunner with only what its query watch needs; each start takes the next query."""
    r = ViewRunner.__new__(ViewRunner)
    r.dataset, r.state, r.error, r.failed_at = "v", ViewState.LIVE, None, None
    r._lock, r._stopping, r.restarts = threading.Lock(), False, 0
    r._spark, r._opts, r._frame = object(), object(), None
    r.position = Position()
    r.on_change = lambda _: None
    r.query = queries.pop(0)
    monkeypatch.setattr(r, "prepare", lambda spark, opts: "frame")
    monkeypatch.setattr(r, "_start_query", lambda frame, opts: queries.pop(0))
    monkeypatch.setattr(runner_module, "RESTART_PAUSE_S", 0.0)
    return r


def test_a_query_that_dies_in_spark_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    died = RuntimeError("org.apache.spark.SparkException: Task not serializable")
    r = _runner([FakeQuery(died), FakeQuery(died), FakeQuery(None)], monkeypatch)
    r._watch()
    assert r.restarts == 2
    assert r.state == ViewState.STOPPED and r.error is None


def test_it_gives_up_after_the_last_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    died = RuntimeError("boom")
    r = _runner([FakeQuery(died) for _ in range(MAX_RESTARTS + 1)], monkeypatch)
    r._watch()
    assert r.restarts == MAX_RESTARTS
    assert r.state == ViewState.FAILED and r.error == "boom"


def test_a_failure_of_the_views_own_batch_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _runner([FakeQuery(RuntimeError("batch 3 failed")), FakeQuery(None)], monkeypatch)
    r._fail("transformation raised at offset 7", None)  # what _batch does before it raises
    r._watch()
    assert r.restarts == 0 and r.state == ViewState.FAILED
    assert r.error == "transformation raised at offset 7"


def test_a_stopping_view_is_not_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    r: Any = _runner([FakeQuery(RuntimeError("stopped under it")), FakeQuery(None)], monkeypatch)
    r._stopping = True
    r._watch()
    assert r.restarts == 0
