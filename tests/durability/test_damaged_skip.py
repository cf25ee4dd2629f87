"""Pulsar consumers at a damaged entry (issue 21, item 6): the protocol cannot push a read
error, so by default the subscription waits there and says so (stats, metrics, one log line
naming what to do); with --auto-skip-non-recoverable-data true (Pulsar's
autoSkipNonRecoverableData) it skips the damage, counts and logs it, and goes on."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.durability.test_damaged_segment import ARGS, _damaged_topic

pytestmark = pytest.mark.slow

SKIP = ["--auto-skip-non-recoverable-data", "true"]


def _stats(server: StandaloneProcess, name: str) -> dict[str, Any]:
    url = f"{server.http_url}/admin/v2/persistent/public/default/{name}/stats"
    with urllib.request.urlopen(url, timeout=30) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body["subscriptions"]["s"]


def _ledger_ids(server: StandaloneProcess, name: str) -> list[int]:
    url = f"{server.http_url}/admin/v2/persistent/public/default/{name}/internal-stats"
    with urllib.request.urlopen(url, timeout=30) as r:
        return [ledger["ledgerId"] for ledger in json.loads(r.read())["ledgers"]]


def _metric(server: StandaloneProcess, name: str) -> float:
    text = urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30).read().decode()
    found = re.search(rf'^{name}(?:_total)?{{[^}}]*subscription="s"[^}}]*}} (\S+)$', text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def _wait(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


def _receive(consumer: Any, until: Any) -> list[int]:
    """Messages (their numbers) until ``until(got)`` holds; every one is acknowledged."""
    got: list[int] = []
    while not until(got):
        msg = consumer.receive(30_000)
        got.append(int(msg.data()[:4]))
        consumer.acknowledge(msg)
    return got


def test_a_subscription_waits_at_damage_then_skips_it_when_told(tmp_path: Path) -> None:
    name = f"damaged-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    data = tmp_path / "data"
    damaged = _damaged_topic(data, topic)  # offsets 0..349, entry 150 damaged
    log = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)

    with StandaloneProcess(data, extra_args=ARGS) as server:
        client = pulsar.Client(server.pulsar_url, logger=log)
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert _receive(consumer, lambda got: len(got) == 150) == list(range(150))
        stats = _wait(lambda: _stats(server, name)["blockedAtDamagedPosition"], "blocked")
        second = _ledger_ids(server, name)[1]  # the damaged segment: entry 50 is offset 150
        assert stats == f"{second}:50"
        assert _metric(server, "magnetar_subscription_blocked_on_damaged_data") == 1
        # more dispatch attempts (new messages) meet it again: still one log line
        producer = client.create_producer(topic)
        producer.send(b"9999")
        with pytest.raises(pulsar.Timeout):  # nothing past the damage, nothing skipped
            consumer.receive(2000)
        assert _stats(server, name)["msgSkippedAsDamaged"] == 0
        client.close()
        told = [line for line in server.output if "waits at offset 150" in line]
        assert len(told) == 1, told
        assert "--auto-skip-non-recoverable-data true" in told[0]
        assert "magnetar admin topics check" in told[0] and str(damaged) in told[0]

    # Started again with the setting: the same subscription skips the damage and goes on
    with StandaloneProcess(data, extra_args=[*ARGS, *SKIP]) as server:
        client = pulsar.Client(server.pulsar_url, logger=log)
        consumer = client.subscribe(topic, "s")
        rest = _receive(consumer, lambda got: bool(got) and got[-1] == 9999)
        stats = _stats(server, name)
        skipped = stats["msgSkippedAsDamaged"]
        # what lies past the damage in its segment up to the next readable entry is lost;
        # the segments after it all arrive, in order, once
        assert 1 <= skipped <= 50 and rest[0] == 150 + skipped, (skipped, rest[:3])
        assert rest == [*range(150 + skipped, 350), 9999]
        assert stats["blockedAtDamagedPosition"] is None
        assert _metric(server, "magnetar_subscription_damaged_skipped") == skipped
        assert _metric(server, "magnetar_subscription_blocked_on_damaged_data") == 0
        told = [line for line in server.output if "skips offsets 150.." in line]
        assert len(told) == 1 and f"({skipped} messages)" in told[0], told
        client.close()
