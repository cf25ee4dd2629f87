"""The one retry policy of every Iceberg commit (commit, remove, replace, expire): an attempt
whose commit another writer won (CommitFailedException) runs again, up to COMMIT_TRIES
times; then IcebergCommitError. Other errors are not retried."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pyiceberg.exceptions import CommitFailedException

from magnetar.tier.errors import IcebergCommitError
from magnetar.tier.iceberg.tables import COMMIT_TRIES, _retry_lost_commits

IDENT = ("public", "default", "t")


def _losing(times: int) -> tuple[list[int], Callable[[], str]]:
    """An attempt that loses its first ``times`` commits, and the list of its calls."""
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise CommitFailedException("another writer won")
        return "committed"

    return calls, attempt


def test_a_lost_commit_is_tried_again() -> None:
    calls, attempt = _losing(COMMIT_TRIES - 1)
    assert _retry_lost_commits(IDENT, attempt) == "committed"
    assert len(calls) == COMMIT_TRIES


def test_every_try_lost_is_an_iceberg_commit_error() -> None:
    calls, attempt = _losing(COMMIT_TRIES)
    with pytest.raises(IcebergCommitError, match=f"{COMMIT_TRIES} commits lost to other"):
        _retry_lost_commits(IDENT, attempt)
    assert len(calls) == COMMIT_TRIES


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise IcebergCommitError("half the files are in the table")

    with pytest.raises(IcebergCommitError, match="half the files"):
        _retry_lost_commits(IDENT, attempt)
    assert calls == [1]
