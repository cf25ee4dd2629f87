"""Kafka SCRAM-SHA-256/512: credentials set with 'magnetar admin scram' and with Kafka's
AlterUserScramCredentials (confluent-kafka AdminClient), stored salted in the metadata
store, used by confluent-kafka and kafka-python; a wrong password and a non-super-user's
change are refused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaProducer

from magnetar.core.tokens import create_token, secret_key
from magnetar.testing.server import REPO, StandaloneProcess
from tests.http.helpers import AdminHttp, unique, wait_until


@dataclass
class Node:
    server: StandaloneProcess
    tokens: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.kafka_port}"

    def plain(self, role: str) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": role,
                "sasl.password": f"token:{self.tokens[role]}"}  # fmt: skip

    def scram(self, user: str, password: str, mechanism: str, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                **extra}  # fmt: skip


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("scram")
    key = base / "secret.key"
    key.write_bytes(secret_key())
    server = StandaloneProcess(
        base / "data",
        extra_args=[
            "--authentication-enabled", "true",
            "--token-secret-key", f"file://{key}",
            "--authorization-enabled", "true",
            "--superuser-roles", "admin",
        ],
    )  # fmt: skip
    server.start()
    tokens = {role: create_token(role, key.read_bytes()) for role in ("admin", "bob")}
    admin = AdminHttp(server.http_url, headers={"Authorization": f"Bearer {tokens['admin']}"})
    for user in ("erin", "frank"):
        admin.ok("POST", f"/admin/v2/namespaces/public/default/permissions/{user}", ["produce"])
    try:
        yield Node(server, tokens)
    finally:
        server.stop()


def delivered(conf: dict[str, Any]) -> bool:
    producer = Producer(conf)
    errors: list[Any] = []
    producer.produce(unique("scram"), b"v", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    return errors == [None]


def test_cli_sets_a_credential_used_by_both_clients(node: Node) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--url", node.server.http_url,
         "--token", node.tokens["admin"], "scram", "set", "erin", "--password", "s3cret"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert delivered(node.scram("erin", "s3cret", "SCRAM-SHA-256"))
    producer = KafkaProducer(
        bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="erin", sasl_plain_password="s3cret",
    )  # fmt: skip
    producer.send(unique("scram-kp"), b"v").get(timeout=15)
    producer.close()


def test_alter_user_scram_credentials_then_authenticate(node: Node) -> None:
    admin = AdminClient(node.plain("admin"))
    upsert = UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"pa55"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    described = admin.describe_user_scram_credentials(["frank"])
    info = described["frank"].result(timeout=15)
    assert [(c.mechanism, c.iterations) for c in info.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    assert delivered(node.scram("frank", "pa55", "SCRAM-SHA-512"))


def test_a_wrong_password_is_refused(node: Node) -> None:
    AdminHttp(node.server.http_url, headers={"Authorization": f"Bearer {node.tokens['admin']}"}
              ).ok("PUT", "/magnetar/v1/scram/gina", {"password": "right"})  # fmt: skip
    errors: list[KafkaError] = []
    admin = AdminClient(node.scram("gina", "wrong", "SCRAM-SHA-256", error_cb=errors.append))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)

    def refused() -> bool:
        admin.poll(0.1)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    wait_until(refused, "librdkafka's authentication error")


def test_only_a_super_user_changes_credentials(node: Node) -> None:
    admin = AdminClient(node.plain("bob"))
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"x"
    )
    with pytest.raises(KafkaException, match=r"CLUSTER_AUTHORIZATION_FAILED|super-user"):
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=15)
    admin = AdminHttp(
        node.server.http_url, headers={"Authorization": f"Bearer {node.tokens['admin']}"}
    )
    refused = admin.call("PUT", "/magnetar/v1/scram/bob", {"password": "x", "iterations": 100})
    assert refused.status == 400 and "iterations" in refused.reason
