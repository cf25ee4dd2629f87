"""Entry formats are wired explicitly, not by importing a protocol package for its side
effects (issue 13, hazard 6): in a fresh interpreter that imports only ``magnetar.core``,
a Kafka entry's key (what Key_Shared dispatch hashes) and messages (what offload stores)
are found; before, the key was None and unpacking failed."""

from __future__ import annotations

import subprocess
import sys

from magnetar.protocols.kafka import records
from magnetar.testing.server import REPO

CHILD = """
import sys
from magnetar.core import formats
assert not any(m.startswith("magnetar.protocols") for m in sys.modules), "imported too early"
batch = bytes.fromhex(sys.stdin.read())
print(formats.key_of(formats.KAFKA, batch).decode())
print(b",".join(r.value for r in formats.unpack(formats.KAFKA, batch)).decode())
"""


def test_codecs_are_found_without_importing_a_protocol_package_first() -> None:
    batch = records.encode(
        [
            records.Record(key=b"user-7", value=b"a", timestamp=1, headers=()),
            records.Record(key=b"user-7", value=b"b", timestamp=2, headers=()),
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=batch.hex(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["user-7", "a,b"]
