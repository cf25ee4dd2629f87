"""Numbers never handed out twice, across restarts and processes: blocks reserved with a
compare-and-set on one counter node.

A process takes a block of ``size`` numbers in one versioned write and hands them out from
memory; a crash skips the rest of its block (numbers are unique, not dense). Pulsar's
distributed id generator and Kafka's producer-id blocks work the same way.
"""

from __future__ import annotations

import json

from magnetar.meta.base import MetadataStore
from magnetar.meta.errors import BadVersionError, NodeExistsError


async def reserve_block(meta: MetadataStore, path: str, size: int) -> int:
    """The first number of a block of ``size`` that no caller ever got before.

    Durable when it returns: a later call, in this process or another, starts above it.
    """
    while True:
        node = await meta.get(path)
        start = int(json.loads(node.value)["next"]) if node else 0
        body = json.dumps({"next": start + size}).encode()
        try:
            await meta.put(path, body, expected_version=node.stat.version if node else -1)
        except (BadVersionError, NodeExistsError):
            continue  # another writer took this block: read again
        return start


async def reserve_through(meta: MetadataStore, path: str, number: int) -> None:
    """Make sure no later block of the counter at ``path`` hands out ``number`` or any
    number below it (a no-op when the counter is past it already). Durable when it
    returns; safe to repeat and under concurrent callers."""
    while True:
        node = await meta.get(path)
        start = int(json.loads(node.value)["next"]) if node else 0
        if start > number:
            return
        body = json.dumps({"next": number + 1}).encode()
        try:
            await meta.put(path, body, expected_version=node.stat.version if node else -1)
        except (BadVersionError, NodeExistsError):
            continue  # another writer moved it meanwhile: read again
        return
