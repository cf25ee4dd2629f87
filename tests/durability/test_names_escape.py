"""Names that would escape the data directory (issue 12) and one validation for every entry
point (issue 22, item 4), against a real ``magnetar standalone``.

Each hostile name (``..`` also sent as ``%2E%2E``, a literal ``%2E%2E``, ``/``, NUL, 10,000
characters, unicode) goes through the admin REST API (requests), the Pulsar protocol (the
official pulsar-client) and the Kafka protocol (confluent-kafka, and a raw connection for
the names the client refuses itself). Every attempt must be refused with an error that says
what is wrong — promptly, not by a client timeout — and every file outside the data
directory must be the same before and after. Afterwards the server still serves a normal
topic end to end, offload to the object store included.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

# before kafka-python: wire.py silences the deprecation warning its schema loading raises
from magnetar.protocols.kafka import wire  # noqa: F401
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import unique, wait_until
from tests.kafka.conftest import RawKafka

from kafka.protocol.admin import CreateTopicsRequest  # isort: skip
from kafka.protocol.metadata import MetadataRequest  # isort: skip

BAD_NAMES = {
    "dot-dot": "..",
    "dot": ".",
    "percent-escape": "%2E%2E",
    "slash": "a/b",
    "nul": "a\x00b",
    "ten-thousand": "x" * 10_000,
    "unicode": "café",
    "cjk": "日本",
}
IDS = list(BAD_NAMES)
FAST_S = 5.0  # a refusal arrives in milliseconds; the client's own timeout is 30 s
INVALID_TOPIC_EXCEPTION = 17
SERVER_ARGS = ["--segment-max-entries", "5", "--offload-check-interval", "0.2"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(
        tmp_path_factory.mktemp("names") / "data", extra_args=SERVER_ARGS
    ) as standalone:
        yield standalone


@pytest.fixture
def outside(server: StandaloneProcess) -> Iterator[None]:
    """Fails the test if any file outside the data directory appeared, vanished or changed
    (watched: everything under pytest's base temporary directory, which holds the data
    directory's parent and its siblings, and the file system root)."""
    before = outside_files(server.data_dir)
    yield
    assert outside_files(server.data_dir) == before


def outside_files(data_dir: Path) -> dict[str, tuple[int, int]]:
    data_dir = data_dir.resolve()
    watched = data_dir.parent.parent
    found = {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in watched.rglob("*")
        if p != data_dir and data_dir not in p.parents and not p.is_symlink()
    }
    found.update({str(p): (0, 0) for p in Path("/").iterdir()})
    return found


def url_part(name: str) -> str:
    """``name`` as a path segment: ``..`` percent-encoded (``%2E%2E``) so that no client
    or proxy resolves it away before the server sees it."""
    return "%2E%2E" if name == ".." else "%2E" if name == "." else urllib.parse.quote(name, safe="")


def pulsar_client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def kafka_config(server: StandaloneProcess) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "log_level": 0}


# -- REST ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=IDS)
@pytest.mark.usefixtures("outside")
def test_rest_refuses_the_name_with_412_and_the_reason(
    server: StandaloneProcess, name: str
) -> None:
    bad = url_part(name)
    calls: list[tuple[str, str, Any, str]] = [
        ("PUT", f"/admin/v2/tenants/{bad}", None, "tenant"),
        ("PUT", f"/admin/v2/namespaces/public/{bad}", None, "namespace"),
        ("PUT", f"/admin/v2/namespaces/{bad}/{bad}", None, "tenant"),
        ("PUT", f"/admin/v2/persistent/public/default/{bad}", None, "topic"),
        ("PUT", f"/admin/v2/persistent/public/default/{bad}/partitions", 2, "topic"),
        ("PUT", f"/admin/v2/persistent/{bad}/{bad}/ESCAPED", None, "tenant"),
        ("GET", f"/admin/v2/persistent/public/{bad}/t/internal-stats", None, "namespace"),
        ("GET", f"/lookup/v2/topic/persistent/public/default/{bad}", None, "topic"),
    ]
    for method, path, body, kind in calls:
        reply = requests.request(method, server.http_url + path, json=body, timeout=10)
        assert reply.status_code == 412, (path[:80], reply.status_code, reply.text[:200])
        reason = reply.json()["reason"]
        assert reason.startswith(f"invalid {kind} name "), reason
        assert "characters among ASCII letters, digits and _ - = : ." in reason
        assert len(reason) < 400
    assert requests.get(server.http_url + "/admin/v2/tenants", timeout=10).json() == ["public"]
    namespaces = requests.get(server.http_url + "/admin/v2/namespaces/public", timeout=10)
    assert namespaces.json() == ["public/default"]


# -- the Pulsar protocol ---------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=IDS)
@pytest.mark.usefixtures("outside")
def test_pulsar_client_fails_fast_on_the_name(server: StandaloneProcess, name: str) -> None:
    client = pulsar_client(server)
    try:
        for topic in (
            f"persistent://public/default/{name}",
            f"persistent://{name}/{name}/ESCAPED",
            f"persistent://public/{name}/t",
            f"persistent://{name}/default/t",
        ):
            for attempt in ("producer", "consumer"):
                started = time.monotonic()
                with pytest.raises((pulsar.NotAllowedError, pulsar.InvalidTopicName)):
                    if attempt == "producer":
                        client.create_producer(topic)
                    else:
                        client.subscribe(topic, "s")
                assert time.monotonic() - started < FAST_S, (topic[:60], attempt)
    finally:
        client.close()


# -- the Kafka protocol ----------------------------------------------------------------------


# confluent-kafka refuses a NUL (a C string) and names over 249 characters itself: those
# reach the server through the raw test below
KAFKA_CLIENT_NAMES = {
    key: name for key, name in BAD_NAMES.items() if key not in ("nul", "ten-thousand")
} | {"colon": "a:b"}


@pytest.mark.parametrize("name", KAFKA_CLIENT_NAMES.values(), ids=list(KAFKA_CLIENT_NAMES))
@pytest.mark.usefixtures("outside")
def test_kafka_clients_get_invalid_topic(server: StandaloneProcess, name: str) -> None:
    admin = AdminClient(kafka_config(server))
    (future,) = admin.create_topics([NewTopic(name, 1)], operation_timeout=5).values()
    with pytest.raises(Exception) as info:
        future.result(timeout=FAST_S)
    error = info.value.args[0]
    assert error.code() == KafkaError.TOPIC_EXCEPTION
    assert "invalid topic name" in error.str()

    reports: list[KafkaError | None] = []
    producer = Producer({**kafka_config(server), "message.timeout.ms": 10_000})
    producer.produce(name, b"escaped", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(15) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_EXCEPTION


@pytest.mark.parametrize("name", [*BAD_NAMES.values(), "a:b"], ids=[*IDS, "colon"])
@pytest.mark.usefixtures("outside")
def test_kafka_wire_refuses_the_name(server: StandaloneProcess, name: str) -> None:
    raw = RawKafka(server.kafka_port)
    try:
        metadata = MetadataRequest[4](
            topics=[MetadataRequest.MetadataRequestTopic(name=name)],
            allow_auto_topic_creation=True,
        )
        assert raw.request(metadata).topics[0].error_code == INVALID_TOPIC_EXCEPTION
        create = CreateTopicsRequest[1](
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[]
                )
            ],
            timeout_ms=5000,
            validate_only=False,
        )
        answer = raw.request(create).topics[0]
        assert answer.error_code == INVALID_TOPIC_EXCEPTION
        assert "invalid topic name" in answer.error_message
    finally:
        raw.sock.close()


# -- afterwards ------------------------------------------------------------------------------


@pytest.mark.usefixtures("outside")
def test_a_normal_topic_is_still_served_and_offloaded_inside_the_data_dir(
    server: StandaloneProcess,
) -> None:
    local = unique("after-hostile-names")
    topic = f"persistent://public/default/{local}"
    client = pulsar_client(server)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [b"m-%02d" % i for i in range(20)]
        for payload in sent:
            producer.send(payload)
        received = []
        for _ in sent:
            msg = consumer.receive(10_000)
            consumer.acknowledge(msg)
            received.append(msg.data())
        assert received == sent
    finally:
        client.close()

    admin = f"{server.http_url}/admin/v2/persistent/public/default/{local}/offload"
    assert requests.put(admin, timeout=10).json()["segments"] >= 1
    wait_until(
        lambda: requests.get(admin, timeout=10).json()["status"] == "SUCCESS", "offload done"
    )
    objects = list((server.data_dir / "tier" / "public" / "default" / local).rglob("*.parquet"))
    assert objects, "the offload wrote its Parquet objects under DATA_DIR/tier"

    reports: list[KafkaError | None] = []
    kafka_topic = unique("kafka-after")
    producer_k = Producer(kafka_config(server))
    producer_k.produce(kafka_topic, b"still serving", on_delivery=lambda e, m: reports.append(e))
    assert producer_k.flush(15) == 0 and reports == [None]
