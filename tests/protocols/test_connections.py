"""The connection gate and the per-connection pending limit, in process (no sockets)."""

from __future__ import annotations

import logging

import pytest

from magnetar.core.connections import ConnectionGate, ConnectionLimits, PendingLimit


class FakeTransport:
    """Records pause/resume calls as a transport would see them."""

    def __init__(self) -> None:
        self.reading = True
        self.closing = False

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing


def test_gate_caps_each_address() -> None:
    gate = ConnectionGate("Test", ConnectionLimits(max_connections=0, max_connections_per_ip=2))
    assert [gate.admit("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert gate.admit("10.0.0.2")  # another address is not affected
    gate.release("10.0.0.1")
    assert gate.admit("10.0.0.1")
    assert gate.open == 3


def test_gate_caps_the_total() -> None:
    gate = ConnectionGate("Test", ConnectionLimits(max_connections=2, max_connections_per_ip=0))
    assert [gate.admit(f"10.0.0.{i}") for i in range(3)] == [True, True, False]
    gate.release("10.0.0.0")
    assert gate.admit("10.0.0.9")
    assert dict(gate.by_ip) == {"10.0.0.1": 1, "10.0.0.9": 1}


def test_gate_logs_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    gate = ConnectionGate("Test", ConnectionLimits(max_connections=0, max_connections_per_ip=1))
    with caplog.at_level(logging.WARNING, logger="magnetar.core.connections"):
        assert gate.admit("10.0.0.1")
        assert not any(gate.admit("10.0.0.1") for _ in range(500))
        assert len(caplog.records) == 1
        assert "10.0.0.1" in caplog.records[0].getMessage()
        gate.release("10.0.0.1")  # the episode ends: its refusals are summed
        assert len(caplog.records) == 2
        assert "500 refused" in caplog.records[1].getMessage()
        assert gate.admit("10.0.0.1")
        assert not gate.admit("10.0.0.1")  # a new episode, a new line
        assert len(caplog.records) == 3


def test_gate_without_caps_admits_all() -> None:
    gate = ConnectionGate("Test", ConnectionLimits(max_connections=0, max_connections_per_ip=0))
    assert all(gate.admit("10.0.0.1") for _ in range(5_000))


def test_pending_limit_pauses_at_the_cap_and_resumes_at_half() -> None:
    transport = FakeTransport()
    limit = PendingLimit(max_requests=4, max_bytes=1 << 20)
    limit.transport = transport  # type: ignore[assignment]
    for _ in range(3):
        limit.add(10)
    assert transport.reading
    limit.add(10)
    assert not transport.reading and limit.paused
    limit.add(10)  # what the last read already held is still taken
    limit.done(10)
    limit.done(10)
    assert not transport.reading  # 3 pending: above half
    limit.done(10)
    assert transport.reading and not limit.paused  # 2 pending: half
    assert (limit.requests, limit.bytes) == (2, 20)


def test_pending_limit_counts_bytes() -> None:
    transport = FakeTransport()
    limit = PendingLimit(max_requests=1_000, max_bytes=100)
    limit.transport = transport  # type: ignore[assignment]
    limit.add(150)  # one request over the byte cap is taken alone, then reading pauses
    assert not transport.reading
    limit.done(150)
    assert transport.reading


def test_pending_limit_does_not_resume_a_closing_transport() -> None:
    transport = FakeTransport()
    limit = PendingLimit(max_requests=1, max_bytes=100)
    limit.transport = transport  # type: ignore[assignment]
    limit.add(1)
    transport.closing = True
    limit.done(1)
    assert not transport.reading and not limit.paused
