"""Completing a future from a callback that is told an outcome (a value or an error)."""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


def resolve(fut: asyncio.Future[T], outcome: T | BaseException) -> None:
    """Complete ``fut`` with ``outcome`` (raised by its waiter if it is an exception); a
    future already done (its waiter was cancelled) is left as it is."""
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
