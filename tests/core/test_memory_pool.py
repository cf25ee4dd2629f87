"""Importing magnetar picks Arrow's memory pool (jemalloc, freed pages given back lazily)
unless the user chose one: checked in a fresh interpreter, where Arrow has not allocated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import os, magnetar, pyarrow as pa; pa.array([1]); "
    "print(pa.default_memory_pool().backend_name, os.environ['JE_ARROW_MALLOC_CONF'])"
)


def pool_of(**env: str) -> list[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF")
    }
    done = subprocess.run(
        [sys.executable, "-c", SHOW],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_magnetar_chooses_jemalloc_that_keeps_freed_pages() -> None:
    assert pool_of() == ["jemalloc", "muzzy_decay_ms:-1"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ARROW_DEFAULT_MEMORY_POOL": "system"}, ["system", "muzzy_decay_ms:-1"]),
        ({"JE_ARROW_MALLOC_CONF": "dirty_decay_ms:0"}, ["jemalloc", "dirty_decay_ms:0"]),
    ],
)
def test_a_pool_or_conf_the_user_set_wins(env: dict[str, str], expected: list[str]) -> None:
    assert pool_of(**env) == expected
