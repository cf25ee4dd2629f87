"""The stored view records: the JSON earlier releases wrote reads back unchanged, and a
view's record changes only in the ways its life allows."""

from __future__ import annotations

import pytest

from magnetar.views.errors import ViewConflictError
from magnetar.views.records import (
    AsOfRecord,
    Failure,
    VersionRecord,
    ViewRecord,
    record_from_json,
)

BOOT = {"start": {"t": {"0": 0}}, "target": {"t": {"0": 10}}}
DEFINITION = {"name": "orders", "source": ["t"], "sql": "SELECT 1", "key": ["k"]}


def _version(v: int) -> VersionRecord:
    return VersionRecord(DEFINITION, v, BOOT, 1000 + v)


def test_stored_json_of_earlier_releases_reads_back_the_same() -> None:
    stored = {
        "definition": DEFINITION,
        "version": 2,
        "bootstrap": BOOT,
        "createdMs": 5,
        "failed": {"error": "boom", "at": {"offsets": {"t": {"0": 3}}}},
        "pending": {"definition": DEFINITION, "version": 3, "bootstrap": BOOT, "createdMs": 6},
    }
    record = record_from_json("orders", stored)
    assert isinstance(record, ViewRecord)
    assert record.current.failed == Failure("boom", {"offsets": {"t": {"0": 3}}})
    assert record.pending is not None and record.pending.version == 3
    assert record.to_json() == stored
    as_of = {
        "virtual": True,
        "of": "orders",
        "definition": DEFINITION,
        "dataset": "orders__at_x",
        "at": {"timestamp": 7},
        "rows": 4,
        "createdMs": 8,
    }
    again = record_from_json("orders@x", as_of)
    assert isinstance(again, AsOfRecord) and again.to_json() == as_of


def test_a_view_changes_only_as_its_life_allows() -> None:
    record = ViewRecord("orders", _version(1))
    with pytest.raises(ViewConflictError):
        record.promote()  # nothing pending
    with pytest.raises(ViewConflictError):
        record.build(_version(1))  # not above the served version
    with pytest.raises(ViewConflictError):
        record.fail(Failure("x"), pending=True)  # no pending version to fail
    assert record.next_version() == 2
    record.build(_version(2))
    assert record.next_version() == 3
    record.fail(Failure("pending broke"), pending=True)
    assert record.current.failed is None
    record.build(_version(3))  # a newer definition replaces the failed pending one
    record.resume_error = "could not resume"
    old = record.promote()
    assert (old.version, record.version, record.pending, record.resume_error) == (1, 3, None, None)
    record.fail(Failure("served broke"), pending=False)
    assert record.to_json()["failed"] == {"error": "served broke", "at": None}
    record.retry()
    assert "failed" not in record.to_json()
