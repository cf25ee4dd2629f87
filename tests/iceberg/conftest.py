"""Fixtures of the Iceberg tests: rigs with an embedded catalog, closed at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.testing.processes import PythonChild
from magnetar.tier import LocalObjectStore, ObjectStore
from tests.iceberg.rig import IcebergRig
from tests.tier.conftest import s3_endpoint  # noqa: F401 - the moto S3 server fixture

OpenIcebergRig = Callable[..., Awaitable[IcebergRig]]


@pytest.fixture(autouse=True)
def _polars_plans_with_pyiceberg(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polars would warn that its own planner plugin is not installed (warnings fail tests)."""
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")


@pytest.fixture
async def open_iceberg_rig(tmp_path: Path) -> AsyncIterator[OpenIcebergRig]:
    opened: list[IcebergRig] = []

    async def _open(store: ObjectStore | None = None, **overrides: Any) -> IcebergRig:
        rig = await IcebergRig.open(
            tmp_path, store or LocalObjectStore(tmp_path / "tier"), **overrides
        )
        opened.append(rig)
        return rig

    yield _open
    for rig in reversed(opened):
        await rig.aclose()


async def killed_at(module: str, tmp_path: Path, stage: str, *, timeout: float) -> None:
    """Run ``module`` as a child process over ``tmp_path`` until it prints ``stage``, then
    SIGKILL it there (its stderr kept in ``tmp_path/stderr``)."""
    child = await PythonChild.start(module, str(tmp_path), stage, stderr_path=tmp_path / "stderr")
    async with child:  # SIGKILLed on the way out
        await child.wait_for_line(stage, timeout=timeout)
    assert child.returncode is not None and child.returncode < 0
