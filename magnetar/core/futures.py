"""Completing a future from a callback that is told an outcome (a value or an error), and
a thread's work its cancelled caller still waits for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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


async def to_thread_to_the_end(func: Callable[..., T], *args: Any) -> T:
    """``asyncio.to_thread``, except that a cancelled caller still waits for the thread to
    end before CancelledError reaches it. A thread cannot be stopped, only waited for: so
    whatever it writes (an upload, a catalog commit) has landed before the caller's
    cleanup runs, and the cleanup sees it."""
    work = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(work)
        if not work.cancelled():
            work.exception()  # retrieved: the cancellation is what the caller reports
        raise


async def all_to_the_end(*aws: Awaitable[Any]) -> list[Any]:
    """Every one of ``aws`` run together and waited for to its end, even when another fails
    first (nothing is left running unwatched); their results in order, or the first error
    in that order raised."""
    outcomes = await asyncio.gather(*aws, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes
