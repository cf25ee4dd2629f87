"""Non-persistent topics with the official client: in memory only (never in the journal or a
segment), delivered only to consumers connected at the time, dropped for a consumer without
room, separate from the persistent topic of the same name, listed under
/admin/v2/non-persistent, and RegexSubscriptionMode honoured."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS, assert_nothing_more, drain
from tests.http.helpers import AdminHttp

Mode = pulsar.RegexSubscriptionMode


@pytest.fixture
def name() -> str:
    return f"public/default/np-{uuid.uuid4().hex[:8]}"


def test_only_connected_consumers_get_messages(client: pulsar.Client, name: str) -> None:
    producer = client.create_producer(f"non-persistent://{name}")
    producer.send(b"before anyone listens")
    consumer = client.subscribe(f"non-persistent://{name}", "s")
    producer.send(b"after")
    assert consumer.receive(RECEIVE_MS).data() == b"after"
    assert_nothing_more(consumer)


def test_never_stored_and_separate_from_the_persistent_topic(
    client: pulsar.Client, standalone: StandaloneProcess, name: str
) -> None:
    marker = f"np-marker-{uuid.uuid4().hex}".encode()
    np_consumer = client.subscribe(f"non-persistent://{name}", "s")
    p_consumer = client.subscribe(f"persistent://{name}", "s")
    client.create_producer(f"non-persistent://{name}").send(marker)
    client.create_producer(f"persistent://{name}").send(b"persistent")
    assert np_consumer.receive(RECEIVE_MS).data() == marker
    assert p_consumer.receive(RECEIVE_MS).data() == b"persistent"
    assert_nothing_more(np_consumer)
    assert_nothing_more(p_consumer)
    stored = [p for p in Path(standalone.data_dir).rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if marker in p.read_bytes()]


def test_a_consumer_without_room_misses_messages(
    client: pulsar.Client, standalone: StandaloneProcess, name: str
) -> None:
    consumer = client.subscribe(f"non-persistent://{name}", "slow", receiver_queue_size=5)
    producer = client.create_producer(f"non-persistent://{name}", batching_enabled=False)
    for i in range(50):
        producer.send(b"m%d" % i)
    received = drain(consumer)
    assert 0 < len(received) < 50
    stats = AdminHttp(standalone.http_url).get(f"/admin/v2/non-persistent/{name}/stats")
    assert stats["subscriptions"]["slow"]["msgDropCounter"] == 50 - len(received)


def test_listed_under_non_persistent_only(
    client: pulsar.Client, standalone: StandaloneProcess, name: str
) -> None:
    producer = client.create_producer(f"non-persistent://{name}")
    admin = AdminHttp(standalone.http_url)
    assert f"non-persistent://{name}" in admin.get("/admin/v2/non-persistent/public/default")
    assert f"persistent://{name}" not in admin.get("/admin/v2/persistent/public/default")
    producer.close()  # no producer, no consumer: the topic is gone
    assert f"non-persistent://{name}" not in admin.get("/admin/v2/non-persistent/public/default")
    assert admin.call("GET", f"/admin/v2/non-persistent/{name}/stats").status == 404


def test_seek_is_refused(client: pulsar.Client, name: str) -> None:
    consumer = client.subscribe(f"non-persistent://{name}", "s")
    with pytest.raises(pulsar.PulsarException):
        consumer.seek(pulsar.MessageId.earliest)


@pytest.mark.parametrize(
    ("mode", "domains"),
    [
        (Mode.PersistentOnly, {"persistent"}),
        (Mode.NonPersistentOnly, {"non-persistent"}),
        (Mode.AllTopics, {"persistent", "non-persistent"}),
    ],
    ids=["persistent", "non-persistent", "all"],
)
def test_regex_subscription_modes(
    client: pulsar.Client, mode: pulsar.RegexSubscriptionMode, domains: set[str]
) -> None:
    stem = f"rx-{uuid.uuid4().hex[:8]}"
    names = {d: f"{d}://public/default/{stem}-{d}" for d in ("persistent", "non-persistent")}
    producers = {d: client.create_producer(n) for d, n in names.items()}
    consumer = client.subscribe(
        re.compile(f"public/default/{stem}-.*"),
        "rx",
        consumer_type=pulsar.ConsumerType.Shared,
        regex_subscription_mode=mode,
    )
    for d, producer in producers.items():
        producer.send(d.encode())
    got = {consumer.receive(RECEIVE_MS).topic_name() for _ in domains}
    assert got == {names[d] for d in domains}
    assert_nothing_more(consumer)
