"""TLS listeners with real clients: pulsar-client over pulsar+ssl:// (binary lookup and HTTPS
lookup), confluent-kafka and kafka-python with security.protocol=SSL, an HTTPS admin call;
the plain listeners keep working beside them."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from magnetar.testing.certs import TestCA
from magnetar.testing.server import StandaloneProcess, free_port
from tests.http.helpers import AdminHttp, unique

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@dataclass
class TlsServer:
    server: StandaloneProcess
    ca: TestCA
    pulsar_tls: int
    https: int
    kafka_ssl: int

    @property
    def pulsar_ssl_url(self) -> str:
        return f"pulsar+ssl://127.0.0.1:{self.pulsar_tls}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.https}"

    @property
    def kafka_ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_ssl}"


def tls_args(ca: TestCA, ports: tuple[int, int, int], *extra: str) -> list[str]:
    cert = ca.server()
    return [
        "--tls-enabled", "true",
        "--pulsar-tls-port", str(ports[0]),
        "--https-port", str(ports[1]),
        "--kafka-ssl-port", str(ports[2]),
        "--tls-certificate-file", str(cert.cert),
        "--tls-key-file", str(cert.key),
        "--tls-trust-certs-file", str(ca.cert),
        *extra,
    ]  # fmt: skip


def start_tls_server(directory: Path, *extra: str) -> TlsServer:
    ca = TestCA(directory / "certs")
    ports = (free_port(), free_port(), free_port())
    server = StandaloneProcess(directory / "data", extra_args=tls_args(ca, ports, *extra))
    server.start()
    return TlsServer(server, ca, *ports)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    node = start_tls_server(tmp_path_factory.mktemp("tls"))
    try:
        yield node
    finally:
        node.server.stop()


def round_trip(client: pulsar.Client, topic: str, n: int = 5) -> list[bytes]:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m{i}".encode())
    got = [consumer.receive(timeout_millis=10_000).data() for _ in range(n)]
    return got


def test_pulsar_client_over_tls(tls: TlsServer) -> None:
    client = pulsar.Client(
        tls.pulsar_ssl_url,
        tls_trust_certs_file_path=str(tls.ca.cert),
        operation_timeout_seconds=10,
        logger=QUIET,
    )
    try:
        assert round_trip(client, unique("tls")) == [f"m{i}".encode() for i in range(5)]
    finally:
        client.close()


def test_pulsar_client_looks_up_over_https(tls: TlsServer) -> None:
    """An https:// service URL: the HTTP lookup answers brokerUrlTls, which the client uses."""
    client = pulsar.Client(
        tls.https_url,
        tls_trust_certs_file_path=str(tls.ca.cert),
        operation_timeout_seconds=10,
        logger=QUIET,
    )
    try:
        assert len(round_trip(client, unique("https-lookup"), 3)) == 3
    finally:
        client.close()


def test_pulsar_client_refuses_an_untrusted_server(tls: TlsServer, tmp_path: Path) -> None:
    other = TestCA(tmp_path / "other", "Another CA")
    client = pulsar.Client(
        tls.pulsar_ssl_url,
        tls_trust_certs_file_path=str(other.cert),
        operation_timeout_seconds=3,
        logger=QUIET,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(unique("untrusted"))
    finally:
        client.close()


def test_https_admin_and_lookup(tls: TlsServer) -> None:
    admin = AdminHttp(tls.https_url, context=ssl.create_default_context(cafile=tls.ca.cert))
    assert "public" in admin.get("/admin/v2/tenants")
    topic = unique("lookup")
    answer = admin.get(f"/lookup/v2/topic/persistent/public/default/{topic}")
    assert answer["brokerUrlTls"] == tls.pulsar_ssl_url
    assert answer["httpUrlTls"] == tls.https_url
    path = f"/lookup/v2/topic/persistent/public/default/{topic}"
    plain = AdminHttp(tls.server.http_url).get(path)
    assert plain["brokerUrl"] == tls.server.pulsar_url
    assert plain["brokerUrlTls"] == tls.pulsar_ssl_url


def test_plain_listeners_still_serve(tls: TlsServer) -> None:
    client = pulsar.Client(tls.server.pulsar_url, operation_timeout_seconds=10, logger=QUIET)
    try:
        assert len(round_trip(client, unique("plain"), 2)) == 2
    finally:
        client.close()


def test_confluent_kafka_over_ssl(tls: TlsServer) -> None:
    topic = unique("kssl")
    ssl_conf = {
        "bootstrap.servers": tls.kafka_ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca.cert),
    }
    producer = Producer(ssl_conf)
    for i in range(10):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer({**ssl_conf, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        while len(got) < 10:
            msg = consumer.poll(15)
            assert msg is not None, f"only {len(got)} of 10 messages arrived"
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(10)]


def test_kafka_python_over_ssl(tls: TlsServer) -> None:
    topic = unique("kpssl")
    common = {
        "bootstrap_servers": tls.kafka_ssl_bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(tls.ca.cert),
    }
    producer = KafkaProducer(**common)
    for i in range(5):
        producer.send(topic, f"k{i}".encode()).get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=15_000, **common
    )
    got = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_kafka_metadata_names_the_ssl_listener(tls: TlsServer) -> None:
    """A client bootstrapped on the SSL port is sent to the SSL port, not the plain one."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": tls.kafka_ssl_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(tls.ca.cert),
        }
    )
    brokers = admin.list_topics(timeout=15).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", tls.kafka_ssl)]


@pytest.mark.slow
def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    node = start_tls_server(tmp_path, "--tls-require-trusted-client-cert", "true")
    try:
        role = node.ca.client("alice")
        good = pulsar.Client(
            node.pulsar_ssl_url,
            tls_trust_certs_file_path=str(node.ca.cert),
            authentication=pulsar.AuthenticationTLS(str(role.cert), str(role.key)),
            operation_timeout_seconds=10,
            logger=QUIET,
        )
        try:
            assert len(round_trip(good, unique("mtls"), 2)) == 2
        finally:
            good.close()
        bare = pulsar.Client(
            node.pulsar_ssl_url,
            tls_trust_certs_file_path=str(node.ca.cert),
            operation_timeout_seconds=3,
            logger=QUIET,
        )
        try:
            with pytest.raises(pulsar.PulsarException):
                bare.create_producer(unique("mtls-bare"))
        finally:
            bare.close()
        context = ssl.create_default_context(cafile=node.ca.cert)
        with pytest.raises(OSError):
            AdminHttp(node.https_url, context=context).get("/admin/v2/tenants")
        context.load_cert_chain(role.cert, role.key)
        assert "public" in AdminHttp(node.https_url, context=context).get("/admin/v2/tenants")
        producer = Producer(
            {
                "bootstrap.servers": node.kafka_ssl_bootstrap,
                "security.protocol": "SSL",
                "ssl.ca.location": str(node.ca.cert),
                "ssl.certificate.location": str(role.cert),
                "ssl.key.location": str(role.key),
            }
        )
        producer.produce(unique("mtls-kafka"), b"x")
        assert producer.flush(15) == 0
    finally:
        node.server.stop()


def test_missing_certificate_file_is_refused_at_start(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "certs")
    args = tls_args(ca, (free_port(), free_port(), free_port()))
    args[args.index("--tls-key-file") + 1] = str(tmp_path / "nope.pem")
    server = StandaloneProcess(tmp_path / "data", extra_args=args, startup_timeout=30)
    with pytest.raises(RuntimeError, match="tls_key_file"):
        server.start()
