"""``GET /metrics`` after real traffic: pulsar-client and Kafka clients against a standalone,
then the text parsed with prometheus_client's own parser; the values must match what was sent,
delivered and acknowledged."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.protocols.kafka import wire  # noqa: F401  (silences kafka-python's warning)
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, run_standalone, unique, wait_until

from kafka import KafkaConsumer, KafkaProducer  # isort: skip

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: StandaloneProcess) -> Samples:
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample named ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
    return found[0] if found else None


def names(samples: Samples) -> set[str]:
    return {n for n, _ in samples}


@pytest.fixture(scope="module")
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


def test_pulsar_counts_backlog_and_latency_match_the_traffic(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/{unique('metrics-pulsar')}"
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "audit")  # before publishing: it sees every message
    for i in range(50):
        producer.send(f"m{i}".encode())
    for _ in range(20):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()  # flushes the grouped acknowledgements
    producer.close()
    mine = {"cluster": "standalone", "namespace": "public/default", "topic": topic}

    def settled() -> Samples | None:
        s = scrape(standalone)
        backlog = value(s, "pulsar_subscription_back_log", **mine, subscription="audit")
        return s if backlog == 30 else None

    s = wait_until(settled, "the subscription's backlog to reach 30 after 20 acks")
    assert value(s, "pulsar_in_messages_total", **mine) == 50
    # bytes as stored, each message's metadata with its payload (as Pulsar counts them)
    payload = sum(len(f"m{i}") for i in range(50))
    assert payload < value(s, "pulsar_in_bytes_total", **mine) < payload + 50 * 64
    assert value(s, "pulsar_out_bytes_total", **mine) == value(s, "pulsar_in_bytes_total", **mine)
    # the consumer's receiver queue took all 50 (1000 permits), 20 of them acknowledged
    assert value(s, "pulsar_out_messages_total", **mine) == 50
    assert value(s, "pulsar_msg_backlog", **mine) == 30
    assert value(s, "pulsar_subscriptions_count", **mine) == 1
    assert value(s, "pulsar_producers_count", **mine) == 0
    assert value(s, "pulsar_consumers_count", **mine) == 0
    assert value(s, "pulsar_storage_size", **mine) > 0
    assert value(s, "pulsar_storage_backlog_size", **mine) > 0
    assert value(s, "pulsar_storage_offloaded_size", **mine) == 0
    # one entry per send (no batching): one latency observation each
    assert value(s, "pulsar_publish_latency_count", **mine) == 50
    assert value(s, "pulsar_publish_latency_bucket", **mine, le="+Inf") == 50
    assert value(s, "magnetar_subscription_out_messages_total", **mine, subscription="audit") == 50
    # the journal fsynced each group commit (fsync=always) and timed it
    assert value(s, "magnetar_journal_fsync_latency_seconds_count") >= 1
    assert value(s, "magnetar_journal_group_commit_entries_count") >= 1
    assert value(s, "magnetar_journal_entries_total") >= 50
    assert value(s, "magnetar_tail_cache_hits_total") >= 1  # the consumer read the fresh tail
    assert 0 < value(s, "magnetar_tail_cache_hit_ratio") <= 1
    assert value(s, "process_resident_memory_bytes") > 0


def test_kafka_produce_and_fetch_are_counted_with_request_latency(
    standalone: StandaloneProcess,
) -> None:
    name = unique("metrics-kafka")
    bootstrap = f"127.0.0.1:{standalone.kafka_port}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for i in range(30):
        producer.send(name, f"k{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(
        name,
        bootstrap_servers=bootstrap,
        group_id=unique("g"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
    )
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == 30:
            break
    consumer.close()
    assert len(got) == 30
    s = scrape(standalone)
    mine = {"topic": f"persistent://public/default/{name}"}
    assert value(s, "pulsar_in_messages_total", **mine) == 30
    assert value(s, "pulsar_out_messages_total", **mine) == 30
    assert value(s, "magnetar_kafka_request_latency_seconds_count", api="Produce") >= 30
    assert value(s, "magnetar_kafka_request_latency_seconds_count", api="Fetch") >= 1
    assert value(s, "magnetar_kafka_request_latency_seconds_count", api_key="3") >= 1  # Metadata


@pytest.fixture(scope="module")
def per_namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(
        tmp_path_factory,
        "--expose-topic-level-metrics",
        "false",
        "--segment-max-entries",
        "10",
    )


def test_topic_level_off_sums_per_namespace_and_counts_offload(
    per_namespace: StandaloneProcess,
) -> None:
    admin = AdminHttp(per_namespace.http_url)
    admin.ok("PUT", "/admin/v2/namespaces/public/quiet")
    client = pulsar.Client(
        per_namespace.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        for local, n in (("a", 25), ("b", 7)):
            topic = f"persistent://public/quiet/{local}"
            client.subscribe(topic, "s").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(n):
                producer.send(b"x%d" % i)
            producer.close()
    finally:
        client.close()
    reply = admin.call("PUT", "/admin/v2/persistent/public/quiet/a/offload")
    assert reply.status == 202, reply

    def offloaded() -> Samples | None:
        s = scrape(per_namespace)
        done = value(s, "magnetar_offload_segments_total", namespace="public/quiet")
        return s if done == 2 else None  # 25 entries, 10 a segment: two closed segments

    s = wait_until(offloaded, "two segments of public/quiet/a offloaded", timeout=60)
    ns = {"cluster": "standalone", "namespace": "public/quiet"}
    assert value(s, "pulsar_in_messages_total", **ns) == 32
    assert value(s, "pulsar_msg_backlog", **ns) == 32
    assert value(s, "pulsar_topics_count", **ns) == 2
    assert value(s, "pulsar_subscriptions_count", **ns) == 2
    assert value(s, "pulsar_publish_latency_count", **ns) == 32
    assert value(s, "pulsar_storage_offloaded_size", **ns) > 0
    assert value(s, "magnetar_offload_bytes_total", **ns) > 0
    assert value(s, "magnetar_offload_lag_bytes", **ns) == 0
    # no series carries a topic or subscription label
    assert not [k for k in s if any(label == "topic" for label, _ in k[1])]
    assert "pulsar_subscription_back_log" not in names(s)


@pytest.fixture(scope="module")
def broken_tier(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StandaloneProcess, Path]]:
    """A standalone whose object store is a directory we can break (and mend) under it."""
    tier = tmp_path_factory.mktemp("tier")
    yield from (
        (server, tier)
        for server in run_standalone(
            tmp_path_factory,
            "--tier-url",
            f"file://{tier}",
            "--segment-max-entries",
            "10",
            "--offload-check-interval",
            "0.2",
        )
    )


def test_offload_lag_grows_while_the_object_store_fails_then_clears(
    broken_tier: tuple[StandaloneProcess, Path],
) -> None:
    """``magnetar_offload_lag_bytes``/``_seconds``: segments due for offload that cannot go
    (the object store's directory became a file) show as lag, growing with their wait; once
    the store works again the sweep offloads them and both go back to 0 (issue 19)."""
    server, tier = broken_tier
    shutil.rmtree(tier)
    tier.write_text("not a directory: every object write fails")
    topic = f"persistent://public/default/{unique('stuck')}"
    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(25):
            producer.send(b"x%d" % i)
        producer.close()
    finally:
        client.close()
    admin = AdminHttp(server.http_url)
    local = topic.removeprefix("persistent://")
    assert admin.ok("PUT", f"/admin/v2/persistent/{local}/offload") == {"segments": 2}
    mine = {"namespace": "public/default", "topic": topic}

    def lagging(above: float) -> Samples | None:
        s = scrape(server)
        seconds = value(s, "magnetar_offload_lag_seconds", **mine) or 0
        return s if seconds > above else None

    s = wait_until(lambda: lagging(0), "offload lag in seconds above 0")
    first = value(s, "magnetar_offload_lag_seconds", **mine)
    # the two closed segments (10 entries each) wait: their bytes, all of them
    ledgers = admin.get(f"/admin/v2/persistent/{local}/internalStats")["ledgers"]
    closed = sum(int(seg["size"]) for seg in ledgers[:-1])
    assert len(ledgers) == 3 and closed > 0
    assert value(s, "magnetar_offload_lag_bytes", **mine) == closed
    assert value(s, "magnetar_offload_segments_total", **mine) == 0
    offload = f"/admin/v2/persistent/{local}/offload"
    wait_until(lambda: admin.get(offload)["lastError"], "the failed offload's error")
    wait_until(lambda: lagging(first + 0.5), "offload lag growing while the store fails")

    tier.unlink()
    tier.mkdir()

    def cleared() -> Samples | None:
        s = scrape(server)
        return s if value(s, "magnetar_offload_segments_total", **mine) == 2 else None

    s = wait_until(cleared, "both segments offloaded once the store works", timeout=60)
    assert value(s, "magnetar_offload_lag_bytes", **mine) == 0
    assert value(s, "magnetar_offload_lag_seconds", **mine) == 0
