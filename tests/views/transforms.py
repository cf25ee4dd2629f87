"""Transformations the tests' standalone servers import (``tests.views.transforms:NAME``)."""

from __future__ import annotations

from typing import Any

State = dict[str, Any] | None


def balance(state: State, event: dict[str, Any]) -> State:
    """A running balance that refuses overdrafts: order matters (a withdrawal applied before
    the deposit that covers it is refused, after it succeeds)."""
    current = dict(state or {"balance": 0, "refused": 0, "applied": 0})
    amount = int(event["data"]["amount"])
    if current["balance"] + amount < 0:
        current["refused"] += 1
    else:
        current["balance"] += amount
        current["applied"] += 1
    return current


def count(state: State, event: dict[str, Any]) -> State:
    current = dict(state or {"n": 0})
    current["n"] += 1
    current["last"] = event["offset"]
    return current


def explode_on_13(state: State, event: dict[str, Any]) -> State:
    """Raises on the event whose amount is 13: the view must go FAILED at that offset."""
    if int(event["data"]["amount"]) == 13:
        raise ValueError("unlucky amount 13")
    return count(state, event)


def close_account(state: State, event: dict[str, Any]) -> State:
    """Deletes the key's state on amount 0 (returns None)."""
    if int(event["data"]["amount"]) == 0:
        return None
    return balance(state, event)


NOT_CALLABLE = 42
