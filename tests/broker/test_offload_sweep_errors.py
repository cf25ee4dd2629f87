"""A sweep that fails on one topic logs it and goes on with the others: Magnetar's own errors
(a metadata store between sessions, say) in one line, anything else with its traceback."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from magnetar.broker.offload import OffloadService
from magnetar.meta.errors import MetadataError


async def test_a_failing_topic_is_logged_by_kind_and_the_sweep_goes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = {name: SimpleNamespace(name=name) for name in ("expired", "broken", "fine")}
    service = OffloadService(SimpleNamespace(topics=topics), interval=1.0)  # type: ignore[arg-type]
    swept: list[str] = []

    async def sweep_topic(topic: Any) -> None:  # the faults injected
        swept.append(topic.name)
        if topic.name == "expired":
            raise MetadataError("metadata store zk: SessionExpiredError: ")
        if topic.name == "broken":
            raise RuntimeError("a bug")

    monkeypatch.setattr(service, "_sweep_topic", sweep_topic)
    with caplog.at_level(logging.WARNING, logger="magnetar.broker.offload"):
        await service.sweep()
    assert swept == ["expired", "broken", "fine"]
    expired, broken = caplog.records
    assert expired.levelno == logging.WARNING and expired.exc_info is None
    assert "expired" in expired.getMessage() and "SessionExpiredError" in expired.getMessage()
    assert broken.levelno == logging.ERROR and broken.exc_info is not None
