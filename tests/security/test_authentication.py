"""Authentication with real clients: JWT tokens (keys and tokens made by ``magnetar tokens``)
and basic auth on the Pulsar port (CONNECT), HTTP (Authorization) and Kafka (SASL PLAIN and
OAUTHBEARER); a wrong, expired or missing credential is refused on each; a long-lived
Pulsar connection is re-authenticated through AUTH_CHALLENGE when its token expires."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from magnetar.core.authentication import apr1
from magnetar.core.tokens import create_token
from magnetar.testing.server import REPO, StandaloneProcess
from tests.http.helpers import AdminHttp, unique, wait_until

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def magnetar(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass
class AuthServer:
    server: StandaloneProcess
    key: Path
    token: str  # role alice, no expiry

    def pulsar(self, auth: Any = None, timeout: int = 10) -> pulsar.Client:
        return pulsar.Client(
            self.server.pulsar_url,
            authentication=auth,
            operation_timeout_seconds=timeout,
            logger=QUIET,
        )

    def kafka(self, **conf: Any) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.server.kafka_port}", **conf}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    base = tmp_path_factory.mktemp("auth")
    key = base / "secret.key"
    magnetar("tokens", "create-secret-key", "--output", str(key))
    token = magnetar("tokens", "create", "--secret-key", f"file://{key}", "--subject", "alice")
    htpasswd = base / "htpasswd"
    htpasswd.write_text(f"admin:{apr1('123456', 'Ab3dEf9h')}\n")
    server = StandaloneProcess(
        base / "data",
        extra_args=[
            "--authentication-enabled", "true",
            "--authentication-providers", "token,basic",
            "--token-secret-key", f"file://{key}",
            "--basic-auth-conf", str(htpasswd),
            "--authentication-refresh-check-seconds", "0.5",
        ],
    )  # fmt: skip
    server.start()
    try:
        yield AuthServer(server, key, token)
    finally:
        server.stop()


def other_token(tmp_path: Path, role: str = "alice") -> str:
    key = tmp_path / "other.key"
    magnetar("tokens", "create-secret-key", "--output", str(key))
    return create_token(role, key.read_bytes())


def short_token(node: AuthServer, seconds: int, role: str = "alice") -> str:
    return create_token(role, node.key.read_bytes(), expires_in=seconds)


def refusals(node: AuthServer, text: str) -> list[str]:
    return [line for line in node.server.output if text in line]


# -- Pulsar ------------------------------------------------------------------------------


def test_pulsar_token_is_accepted(node: AuthServer) -> None:
    client = node.pulsar(pulsar.AuthenticationToken(node.token))
    try:
        topic = unique("tok")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"hello")
        assert consumer.receive(timeout_millis=10_000).data() == b"hello"
    finally:
        client.close()


@pytest.mark.parametrize("credential", ["wrong-key", "expired", "garbage", "none"])
def test_pulsar_refuses_a_bad_credential(node: AuthServer, tmp_path: Path, credential: str) -> None:
    auth = {
        "wrong-key": lambda: pulsar.AuthenticationToken(other_token(tmp_path)),
        "expired": lambda: pulsar.AuthenticationToken(short_token(node, -60)),
        "garbage": lambda: pulsar.AuthenticationToken("not.a.token"),
        "none": lambda: None,
    }[credential]()
    client = node.pulsar(auth, timeout=3)
    try:
        # Pulsar answers CONNECT with ERROR AuthenticationError and closes; the C++ client
        # takes any answer but CONNECTED as a failed connection and retries until its
        # operation timeout, as it does against Pulsar itself
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(unique("refused"))
    finally:
        client.close()
    wait_until(lambda: refusals(node, "refusing Pulsar connection"), "the refusal in the log")


def test_pulsar_basic_auth(node: AuthServer) -> None:
    client = node.pulsar(pulsar.AuthenticationBasic("admin", "123456"))
    try:
        client.create_producer(unique("basic")).send(b"x")
    finally:
        client.close()
    wrong = node.pulsar(pulsar.AuthenticationBasic("admin", "654321"), timeout=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            wrong.create_producer(unique("basic-wrong"))
    finally:
        wrong.close()


@pytest.mark.slow
def test_expiring_token_is_renewed_through_auth_challenge(node: AuthServer) -> None:
    """A token valid 2 s, supplied afresh on each call: after it expires the broker sends
    AUTH_CHALLENGE, the client answers with a new token, and the same consumer goes on."""
    issued: list[float] = []

    def supplier() -> str:
        issued.append(time.monotonic())
        return short_token(node, 2)

    client = node.pulsar(pulsar.AuthenticationToken(supplier))
    try:
        topic = unique("renew")
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        first = len(issued)
        producer.send(b"before")
        assert consumer.receive(timeout_millis=10_000).data() == b"before"
        wait_until(lambda: len(issued) >= first + 2, "two renewals of the expiring token")
        producer.send(b"after")
        assert consumer.receive(timeout_millis=10_000).data() == b"after"
    finally:
        client.close()
    assert "AuthenticationError" not in "".join(node.server.output[-50:])


@pytest.mark.slow
def test_expired_token_that_is_not_renewed_closes_the_connection(node: AuthServer) -> None:
    token = short_token(node, 2)
    client = node.pulsar(pulsar.AuthenticationToken(token), timeout=3)
    try:
        producer = client.create_producer(unique("stale"), send_timeout_millis=2000)
        producer.send(b"while valid")

        def refused() -> bool:
            try:
                producer.send(b"after expiry")
            except pulsar.PulsarException:
                return True
            return False

        wait_until(refused, "a send refused once the token expired", timeout=30)
    finally:
        client.close()


# -- HTTP --------------------------------------------------------------------------------


def test_http_bearer_and_basic(node: AuthServer) -> None:
    url = node.server.http_url
    assert "public" in AdminHttp(url, headers={"Authorization": f"Bearer {node.token}"}).get(
        "/admin/v2/tenants"
    )
    basic = base64.b64encode(b"admin:123456").decode()
    assert "public" in AdminHttp(url, headers={"Authorization": f"Basic {basic}"}).get(
        "/admin/v2/tenants"
    )


@pytest.mark.parametrize("header", [None, "Bearer not.a.token", "Basic YWRtaW46eA==", "Digest x"])
def test_http_refuses_with_401(node: AuthServer, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    reply = AdminHttp(node.server.http_url, headers=headers).call("PUT", "/admin/v2/tenants/x")
    assert reply.status == 401
    assert reply.reason


def test_http_refuses_an_expired_token(node: AuthServer) -> None:
    headers = {"Authorization": f"Bearer {short_token(node, -5)}"}
    reply = AdminHttp(node.server.http_url, headers=headers).call("GET", "/admin/v2/tenants")
    assert reply.status == 401
    assert "expired" in reply.reason


def test_metrics_stay_open(node: AuthServer) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{node.server.http_url}/metrics", timeout=10) as answer:
        assert answer.status == 200


# -- Kafka -------------------------------------------------------------------------------


def test_kafka_sasl_plain_with_token(node: AuthServer) -> None:
    conf = node.kafka(
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": f"token:{node.token}",
        }
    )
    producer = Producer(conf)
    producer.produce(unique("kplain"), b"v")
    assert producer.flush(15) == 0


def test_kafka_oauthbearer(node: AuthServer) -> None:
    def oauth(_config: str) -> tuple[str, float]:
        return node.token, time.time() + 3600

    conf = node.kafka(
        **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
        oauth_cb=oauth,
    )
    producer = Producer(conf)
    producer.produce(unique("koauth"), b"v")
    assert producer.flush(15) == 0


@pytest.mark.parametrize("case", ["wrong-token", "expired", "wrong-password", "no-sasl"])
def test_kafka_refuses_a_bad_credential(node: AuthServer, tmp_path: Path, case: str) -> None:
    errors: list[KafkaError] = []
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice"}  # fmt: skip
    conf = {
        "wrong-token": {**sasl, "sasl.password": f"token:{other_token(tmp_path)}"},
        "expired": {**sasl, "sasl.password": f"token:{short_token(node, -60)}"},
        "wrong-password": {**sasl, "sasl.username": "admin", "sasl.password": "nope"},
        "no-sasl": {},
    }[case]
    admin = AdminClient(node.kafka(**conf, error_cb=errors.append))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    if case != "no-sasl":  # librdkafka names the refusal; without SASL the broker just closes

        def refused() -> bool:
            admin.poll(0.1)  # error_cb is served by poll
            return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

        wait_until(refused, "librdkafka's authentication error")


def test_kafka_python_sasl_plain_with_basic_user(node: AuthServer) -> None:
    common = {
        "bootstrap_servers": f"127.0.0.1:{node.server.kafka_port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "admin",
        "sasl_plain_password": "123456",
    }
    topic = unique("kp-basic")
    producer = KafkaProducer(**common)
    producer.send(topic, b"one").get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=15_000, **common
    )
    assert [m.value for _, m in zip(range(1), consumer, strict=False)] == [b"one"]
    consumer.close()


@pytest.mark.slow
def test_kafka_sessions_end_with_their_token(node: AuthServer) -> None:
    """KIP-368: a SASL session lasts as long as its token. A client handing out fresh tokens
    (OAUTHBEARER's oauth_cb) keeps producing across several expiries; one whose PLAIN token
    has expired is cut off and refused when it comes back."""
    issued: list[float] = []

    def oauth(_config: str) -> tuple[str, float]:
        issued.append(time.time())
        return short_token(node, 3), time.time() + 3

    fresh = Producer(
        node.kafka(
            **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
            oauth_cb=oauth,
        )
    )
    topic = unique("kreauth")
    outcomes: list[Any] = []

    def produced_across_expiries() -> bool:
        fresh.produce(topic, b"v", on_delivery=lambda err, _m: outcomes.append(err))
        fresh.flush(15)
        return time.time() - issued[0] > 7

    wait_until(produced_across_expiries, "7 s of producing", timeout=60)
    assert outcomes and all(err is None for err in outcomes), outcomes
    errors: list[KafkaError] = []
    stale = AdminClient(node.kafka(**{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": f"token:{short_token(node, 2)}",
    }, error_cb=errors.append))  # fmt: skip
    stale.list_topics(timeout=10)

    def cut_off() -> bool:
        with contextlib.suppress(KafkaException):  # refused: error_cb says why
            stale.list_topics(timeout=2)
        stale.poll(0.1)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    wait_until(cut_off, "the expired PLAIN session refused", timeout=60)
