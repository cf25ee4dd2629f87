"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.testing.server import StandaloneProcess


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One real ``magnetar standalone`` per test module, on free ports."""
    data: Path = tmp_path_factory.mktemp("standalone")
    server = StandaloneProcess(data)
    server.start()
    try:
        yield server
    finally:
        server.stop()
