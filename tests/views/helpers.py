"""Publishing events, waiting with deadlines, and plain single-pass references."""

from __future__ import annotations

import json
import random
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import pulsar
from pulsar.schema import Integer, JsonSchema, Record, String

from magnetar.cli.rest import RestClient

T = TypeVar("T")
USERS = [f"u{i}" for i in range(5)]


class Txn(Record):
    user = String()
    amount = Integer()


def events(n: int, seed: int, *, unlucky_at: int | None = None) -> list[tuple[str, int]]:
    """(user, amount) pairs; amounts in -30..40 except 13, which appears only at
    ``unlucky_at``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        amount = rng.choice([a for a in range(-30, 41) if a != 13])
        out.append((rng.choice(USERS), 13 if i == unlucky_at else amount))
    return out


def publish(
    client: pulsar.Client, topic: str, items: list[tuple[str, int]], chunk: int = 0
) -> None:
    """Send every item, one entry each, and wait for every acknowledgement; with ``chunk``,
    wait after each ``chunk`` items (so a segment rolls between chunks)."""
    producer = client.create_producer(
        topic, schema=JsonSchema(Txn), batching_enabled=False, block_if_queue_full=True
    )
    try:
        for i, (user, amount) in enumerate(items, 1):
            producer.send_async(Txn(user=user, amount=amount), None)
            if chunk and i % chunk == 0:
                producer.flush()
        producer.flush()
    finally:
        producer.close()


def wait_for(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s (last: {last!r})")


def now_after_tick() -> int:
    """The current time in ms, once the clock has moved past the last event's publish time."""
    start = time.time_ns() // 1_000_000
    return wait_for(lambda: (ms := time.time_ns() // 1_000_000) > start + 1 and ms, 5, "clock")


def view(rest: RestClient, name: str) -> dict[str, Any]:
    status: dict[str, Any] = rest.call("GET", f"/views/{urllib.parse.quote(name, safe='@')}")
    return status


def rows_by(rest: RestClient, name: str, key: str) -> dict[Any, dict[str, Any]]:
    path = f"/views/{urllib.parse.quote(name, safe='@')}/rows?limit=100000"
    return {r[key]: r for r in rest.call("GET", path)["rows"]}


def reached(rest: RestClient, name: str, topic: str, end: int) -> dict[str, Any] | None:
    status = view(rest, name)
    done = status["offsets"].get(f"persistent://public/default/{topic}", {}).get("0", 0)
    return status if done >= end else None


def balances(items: list[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    """The reference running balance: one plain pass, refusing overdrafts."""
    out: dict[str, dict[str, Any]] = {}
    for user, amount in items:
        s = out.setdefault(user, {"user": user, "balance": 0, "refused": 0, "applied": 0})
        if s["balance"] + amount < 0:
            s["refused"] += 1
        else:
            s["balance"] += amount
            s["applied"] += 1
    return out


def counts(items: list[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for user, amount in items:
        s = out.setdefault(user, {"user": user, "n": 0, "total": 0})
        s["n"] += 1
        s["total"] += amount
    return out


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def last_words(output: list[str], tail: int = 40) -> str:
    """What a server printed that says why a view stopped: the JVM's 'Caused by' and
    serialization-stack lines and view warnings (a Java trace's own tail is mostly frames),
    then its last ``tail`` lines."""
    telling = [ln for ln in output[:-tail] if _telling(ln)]
    return "".join([*telling[-60:], "...\n", *output[-tail:]])


def _telling(line: str) -> bool:
    """A line of a JVM trace that names something (not a frame), or a view warning."""
    named = ("Caused by", "Serialization stack", "Exception", "view ")
    return any(w in line for w in named) or line.lstrip("E ").startswith(("\t- ", "- "))
