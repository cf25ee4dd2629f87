"""The crash test's child process: appends deterministic entries until it is killed.

    python -m tests.storage.crash_child DATA_DIR SIDE_FILE SEED ROUND

It opens (and so recovers) the engine on DATA_DIR, creates the partitions, prints
``ready`` and then runs TASKS appenders until the parent SIGKILLs it. Each appender logs
to SIDE_FILE, one ``os.write`` of one whole line on an O_APPEND descriptor per event::

    intent <partition> <ident> <count> <sha256>          before calling append
    ack <partition> <ident> <base_offset> <count> <sha256>  after append returned
    stats <rolls> <checkpoints>                          when the engine's counters moved

``ident`` is unique per entry (round, task, sequence) and travels in the entry's
``event_time``, so the verifier can tell every stored entry apart even when two payloads
are equal. SIGKILL does not drop the page cache, so no fsync is needed: a line written
is a line the parent reads. An append acknowledged just before the kill may lack its
``ack`` line; that only means it goes unchecked. The side file never claims more than was
acknowledged.

The parent imports the shared definitions (settings, partitions, the side-file format)
from here, so child and verifier cannot disagree about them.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.core.config import Settings, build_settings
from magnetar.meta import open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings

PARTITIONS = ("p0", "p1", "p2")
TASKS = 6
MAX_PAYLOAD = 20 * 1024
MAX_COUNT = 50
READY = "ready"


def crash_settings(data_dir: Path) -> Settings:
    """Small segments and journal files, so rolls and checkpoints happen within a round."""
    return build_settings(
        env={},
        overrides={
            "data_dir": data_dir,
            "fsync": "always",
            "segment_max_bytes": 64 * 1024,
            "journal_max_bytes": 256 * 1024,
            "index_interval_bytes": 1024,
            "tail_cache_bytes": 256 * 1024,
        },
    )


def entry_ident(round_no: int, task: int, seq: int) -> int:
    return (round_no << 40) | (task << 32) | seq


def payload_for(ident: int, size: int) -> bytes:
    return hashlib.shake_256(ident.to_bytes(8, "big")).digest(size)


def payload_size(rng: random.Random) -> int:
    """1 B to 20 KiB, log-uniform (most entries small, some large), both bounds included."""
    roll = rng.random()
    if roll < 0.05:
        return 1
    if roll < 0.10:
        return MAX_PAYLOAD
    return min(MAX_PAYLOAD, int(2 ** rng.uniform(0, math.log2(MAX_PAYLOAD))))


def digest_of(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True, slots=True)
class Intent:
    partition: str
    count: int
    digest: str


@dataclass(frozen=True, slots=True)
class Ack:
    partition: str
    ident: int
    base_offset: int
    count: int
    digest: str


@dataclass(slots=True)
class SideLog:
    """What one child wrote to its side file."""

    intents: dict[int, Intent] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    rolls: int = 0
    checkpoints: int = 0

    @classmethod
    def read(cls, path: Path) -> SideLog:
        log = cls()
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines(keepends=True):
            if line.endswith("\n"):  # a line is complete or not written at all; be strict
                log._add(line.split())
        return log

    def _add(self, words: list[str]) -> None:
        kind, *rest = words
        if kind == "intent":
            name, ident, count, digest = rest
            self.intents[int(ident)] = Intent(name, int(count), digest)
        elif kind == "ack":
            name, ident, base, count, digest = rest
            self.acks.append(Ack(name, int(ident), int(base), int(count), digest))
        elif kind == "stats":
            self.rolls = max(self.rolls, int(rest[0]))
            self.checkpoints = max(self.checkpoints, int(rest[1]))
        else:
            raise ValueError(f"unknown side-file line {words!r}")


def _log(fd: int, line: str) -> None:
    os.write(fd, f"{line}\n".encode())  # one write per line: lines never interleave


async def _append_forever(
    engine: StorageEngine, side: int, seed: int, round_no: int, task: int
) -> None:
    rng = random.Random(f"{seed}/{task}")
    last_stats = (-1, -1)
    for seq in itertools.count():
        name = rng.choice(PARTITIONS)
        count = rng.randint(1, MAX_COUNT)
        ident = entry_ident(round_no, task, seq)
        payload = payload_for(ident, payload_size(rng))
        digest = digest_of(payload)
        _log(side, f"intent {name} {ident} {count} {digest}")
        entry = await engine.append(name, payload, count=count, event_time=ident)
        _log(side, f"ack {name} {ident} {entry.base_offset} {entry.count} {digest}")
        stats = (engine.stats.rolls, engine.stats.checkpoints)
        if stats != last_stats:
            _log(side, f"stats {stats[0]} {stats[1]}")
            last_stats = stats


async def run(data_dir: Path, side_path: Path, seed: int, round_no: int) -> None:
    """Open the engine, say ready, append until killed. Never returns on its own."""
    settings = crash_settings(data_dir)
    meta = open_metadata_store(settings.metadata)
    engine = await StorageEngine.open(StorageSettings.of(settings), meta)
    for name in PARTITIONS:
        await engine.create_partition(name)
    side = os.open(side_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    print(READY, flush=True)
    await asyncio.gather(
        *(_append_forever(engine, side, seed, round_no, task) for task in range(TASKS))
    )


def main(argv: list[str]) -> None:
    data_dir, side_path, seed, round_no = argv
    asyncio.run(run(Path(data_dir), Path(side_path), int(seed), int(round_no)))


if __name__ == "__main__":
    main(sys.argv[1:])
