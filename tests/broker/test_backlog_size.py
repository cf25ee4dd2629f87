"""``backlogSize`` is bytes, as Pulsar reports it (issue 12); ``msgBacklog`` counts messages.

What counts, as in Pulsar: the sizes of the entries as stored (the entry header, the Pulsar
message metadata and the payload), from the subscription's mark-delete position to the end.
The topic's ``backlogSize`` is its slowest subscription's. The tests send unbatched messages
of one length, so every entry has the same stored size: ``storageSize / N``.
"""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import receive_n
from tests.http.helpers import AdminHttp, unique

BASE = "/admin/v2/persistent/public/default"
N = 50  # sequence ids below 128: every message's metadata has the same length
PAYLOAD = 100


@pytest.fixture
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


def _send(client: pulsar.Client, topic: str, n: int = N) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"{i:04d}".encode().ljust(PAYLOAD, b"."))
    producer.close()


def _stats(admin: AdminHttp, local: str) -> dict[str, Any]:
    stats: dict[str, Any] = admin.get(f"{BASE}/{local}/stats")
    return stats


def test_backlog_size_counts_bytes_of_stored_entries(
    admin: AdminHttp, client: pulsar.Client
) -> None:
    local = unique("backlog-bytes")
    topic = f"persistent://public/default/{local}"
    idle = client.subscribe(topic, "idle")
    reading = client.subscribe(topic, "reading")
    _send(client, topic)
    stats = _stats(admin, local)
    entry, rest = divmod(stats["storageSize"], N)
    assert rest == 0 and entry > PAYLOAD  # stored size: header and metadata count too
    subs = stats["subscriptions"]
    assert (subs["idle"]["msgBacklog"], subs["idle"]["backlogSize"]) == (N, N * entry)
    assert stats["backlogSize"] == N * entry

    receive_n(reading, 20)  # each acknowledged
    reading.close()  # flushes the client's grouped acks before it returns
    stats = _stats(admin, local)
    subs = stats["subscriptions"]
    assert (subs["reading"]["msgBacklog"], subs["reading"]["backlogSize"]) == (30, 30 * entry)
    assert stats["backlogSize"] == N * entry  # the slowest subscription's: "idle"

    idle.close()
    admin.ok("POST", f"{BASE}/{local}/subscription/idle/skip_all")
    stats = _stats(admin, local)
    assert stats["subscriptions"]["idle"]["backlogSize"] == 0
    assert stats["backlogSize"] == 30 * entry


def test_partitioned_stats_sum_backlog_bytes(admin: AdminHttp, client: pulsar.Client) -> None:
    local = unique("backlog-parts")
    admin.ok("PUT", f"{BASE}/{local}/partitions", 2)
    topic = f"persistent://public/default/{local}"
    client.subscribe(topic, "idle").close()
    _send(client, topic)
    body = admin.get(f"{BASE}/{local}/partitioned-stats")
    parts = body["partitions"].values()
    assert body["backlogSize"] == sum(p["backlogSize"] for p in parts) == body["storageSize"]
    merged = body["subscriptions"]["idle"]
    assert (merged["msgBacklog"], merged["backlogSize"]) == (N, body["storageSize"])
