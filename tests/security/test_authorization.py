"""Authorization with real clients: super-users, tenant admins and granted actions, on the
Pulsar port, over REST (Pulsar's permission paths and ``magnetar admin``), on the Kafka port
(ACLs mapped onto the same grants) and at the Spark source's plan endpoint."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from magnetar.core.tokens import create_token, secret_key
from magnetar.testing.server import REPO, StandaloneProcess
from tests.http.helpers import AdminHttp, unique, wait_until

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ROLES = ("admin", "alice", "bob", "carol", "dave")


@dataclass
class Node:
    server: StandaloneProcess
    tokens: dict[str, str]

    def http(self, role: str) -> AdminHttp:
        return AdminHttp(
            self.server.http_url, headers={"Authorization": f"Bearer {self.tokens[role]}"}
        )

    def pulsar(self, role: str) -> pulsar.Client:
        return pulsar.Client(
            self.server.pulsar_url,
            authentication=pulsar.AuthenticationToken(self.tokens[role]),
            operation_timeout_seconds=5,
            logger=QUIET,
        )

    def kafka(self, role: str, **conf: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.server.kafka_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": role,
            "sasl.password": f"token:{self.tokens[role]}",
            **conf,
        }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("authz")
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
    tokens = {role: create_token(role, key.read_bytes()) for role in ROLES}
    admin = AdminHttp(server.http_url, headers={"Authorization": f"Bearer {tokens['admin']}"})
    admin.ok("PUT", "/admin/v2/tenants/acme", {"adminRoles": ["alice"], "allowedClusters": []})
    admin.ok("PUT", "/admin/v2/namespaces/acme/ns")
    try:
        yield Node(server, tokens)
    finally:
        server.stop()


def topic(local: str) -> str:
    return f"persistent://acme/ns/{local}"


# -- Pulsar ------------------------------------------------------------------------------


def test_a_role_without_permission_can_neither_produce_nor_consume(node: Node) -> None:
    client = node.pulsar("bob")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic(unique("t")))
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic(unique("t")), "s")
    finally:
        client.close()


def test_produce_grant_does_not_allow_consume_and_the_other_way(node: Node) -> None:
    name = topic(unique("grants"))
    admin = node.http("admin")
    admin.ok("POST", f"/admin/v2/persistent/{name[13:]}/permissions/carol", ["produce"])
    admin.ok("POST", f"/admin/v2/persistent/{name[13:]}/permissions/dave", ["consume"])
    assert admin.get(f"/admin/v2/persistent/{name[13:]}/permissions") == {
        "carol": ["produce"],
        "dave": ["consume"],
    }
    carol, dave = node.pulsar("carol"), node.pulsar("dave")
    try:
        consumer = dave.subscribe(name, "s")
        carol.create_producer(name).send(b"granted")
        assert consumer.receive(timeout_millis=10_000).data() == b"granted"
        with pytest.raises(pulsar.AuthorizationError):
            carol.subscribe(name, "s2")
        with pytest.raises(pulsar.AuthorizationError):
            dave.create_producer(name)
    finally:
        carol.close()
        dave.close()
    admin.ok("DELETE", f"/admin/v2/persistent/{name[13:]}/permissions/carol")
    again = node.pulsar("carol")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            again.create_producer(name)
    finally:
        again.close()


def test_tenant_admin_produces_and_consumes_in_its_tenant(node: Node) -> None:
    client = node.pulsar("alice")
    try:
        name = topic(unique("own"))
        consumer = client.subscribe(name, "s")
        client.create_producer(name).send(b"mine")
        assert consumer.receive(timeout_millis=10_000).data() == b"mine"
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(unique("public-topic"))  # public/default: not hers
    finally:
        client.close()


def test_a_reserved_subscription_is_refused_to_other_roles(node: Node) -> None:
    admin = node.http("admin")
    admin.ok("POST", "/admin/v2/namespaces/acme/ns/permissions/dave", ["consume"])
    admin.ok("POST", "/admin/v2/namespaces/acme/ns/permissions/carol", ["consume"])
    admin.ok("POST", "/admin/v2/namespaces/acme/ns/permissions/subscription/reserved", ["dave"])
    name = topic(unique("subs"))
    carol, dave = node.pulsar("carol"), node.pulsar("dave")
    try:
        dave.subscribe(name, "reserved")
        with pytest.raises(pulsar.AuthorizationError):
            carol.subscribe(name, "reserved")
        carol.subscribe(name, "open")
    finally:
        carol.close()
        dave.close()
        admin.ok("DELETE", "/admin/v2/namespaces/acme/ns/permissions/reserved/dave")
        admin.ok("DELETE", "/admin/v2/namespaces/acme/ns/permissions/dave")
        admin.ok("DELETE", "/admin/v2/namespaces/acme/ns/permissions/carol")


# -- REST and CLI ------------------------------------------------------------------------


def test_tenant_admin_manages_its_tenant_only(node: Node) -> None:
    alice = node.http("alice")
    ns = unique("ns")
    alice.ok("PUT", f"/admin/v2/namespaces/acme/{ns}")
    assert f"acme/{ns}" in alice.get("/admin/v2/namespaces/acme")
    assert alice.call("PUT", f"/admin/v2/namespaces/public/{ns}").status == 403
    assert alice.call("GET", "/admin/v2/namespaces/public").status == 403
    refused = alice.call("PUT", f"/admin/v2/tenants/{unique('t')}", {"adminRoles": []})
    assert refused.status == 403
    assert "super-user" in refused.reason
    assert node.http("bob").call("GET", "/admin/v2/tenants/acme").status == 403


def test_cli_grants_and_lists_permissions(node: Node) -> None:
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "magnetar.cli", "admin", "--url", node.server.http_url,
             "--token", node.tokens["alice"], "--json", *args],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )  # fmt: skip

    done = admin("namespaces", "grant-permission", "acme/ns", "--role", "erin",
                 "--actions", "produce,consume")  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = admin("namespaces", "permissions", "acme/ns")
    assert '"erin"' in listed.stdout and "consume" in listed.stdout
    bad = admin("namespaces", "grant-permission", "acme/ns", "--role", "erin", "--actions", "fly")
    assert bad.returncode != 0 and "unknown action" in bad.stderr
    assert admin("namespaces", "revoke-permission", "acme/ns", "--role", "erin").returncode == 0
    assert '"erin"' not in admin("namespaces", "permissions", "acme/ns").stdout


def test_spark_plan_needs_consume(node: Node) -> None:
    name = unique("plan")
    admin = node.http("admin")
    admin.ok("PUT", f"/admin/v2/persistent/acme/ns/{name}")
    plan = f"/magnetar/v1/topics/acme/ns/{name}/plan"
    assert node.http("bob").call("GET", plan).status == 403
    admin.ok("POST", f"/admin/v2/persistent/acme/ns/{name}/permissions/bob", ["consume"])
    assert node.http("bob").call("GET", plan).status == 200


# -- Kafka -------------------------------------------------------------------------------


def delivery_errors(producer: Producer, topic_name: str) -> list[KafkaError]:
    errors: list[KafkaError] = []
    producer.produce(topic_name, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    return errors


def test_kafka_acl_grants_produce(node: Node) -> None:
    name = unique("kacl")
    AdminHttp(node.server.http_url, headers={
        "Authorization": f"Bearer {node.tokens['admin']}"}).ok(
        "PUT", f"/admin/v2/persistent/public/default/{name}")  # fmt: skip
    bob = Producer(node.kafka("bob"))
    errors = delivery_errors(bob, name)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(node.kafka("admin"))
    binding = AclBinding(
        ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in admin.create_acls([binding]).values():
        future.result(timeout=15)
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            name,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=15)
    assert [(b.principal, b.operation) for b in described] == [("User:bob", AclOperation.WRITE)]
    assert delivery_errors(Producer(node.kafka("bob")), name) == [None]
    deleted = admin.delete_acls([
        AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob",
                         "*", AclOperation.WRITE, AclPermissionType.ALLOW)])  # fmt: skip
    for future in deleted.values():
        assert len(future.result(timeout=15)) == 1
    errors = delivery_errors(Producer(node.kafka("bob")), name)
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_acls_refused_to_a_plain_role(node: Node) -> None:
    admin = AdminClient(node.kafka("bob"))
    binding = AclBinding(
        ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    with pytest.raises(Exception, match=r"CLUSTER_AUTHORIZATION_FAILED|admin"):
        for future in admin.create_acls([binding]).values():
            future.result(timeout=15)


def test_kafka_group_needs_permission(node: Node) -> None:
    name = unique("kgroup")
    admin = node.http("admin")
    admin.ok("PUT", f"/admin/v2/persistent/public/default/{name}")
    admin.ok("POST", f"/admin/v2/persistent/public/default/{name}/permissions/dave", ["consume"])
    errors: list[KafkaError] = []
    consumer = Consumer(node.kafka("dave", **{"group.id": unique("g"), "error_cb": errors.append,
                                              "auto.offset.reset": "earliest"}))  # fmt: skip
    consumer.subscribe([name])
    deadline = time.monotonic() + 20

    def refused() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error())
        assert time.monotonic() < deadline, f"no group refusal; saw {errors}"
        return any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors)

    try:
        wait_until(refused, "GROUP_AUTHORIZATION_FAILED", timeout=30)
    finally:
        consumer.close()


def test_kafka_metadata_hides_what_the_role_may_not_see(node: Node) -> None:
    visible, hidden = unique("seen"), unique("hidden")
    admin = node.http("admin")
    for name in (visible, hidden):
        admin.ok("PUT", f"/admin/v2/persistent/public/default/{name}")
    admin.ok("POST", f"/admin/v2/persistent/public/default/{visible}/permissions/carol",
             ["consume"])  # fmt: skip
    topics = AdminClient(node.kafka("carol")).list_topics(timeout=15).topics
    assert visible in topics and hidden not in topics


def test_a_client_looking_up_over_http_needs_only_its_grant(node: Node) -> None:
    """pulsar-client on the HTTP service URL GETs the topic's partitions, then looks it up:
    both are lookups, allowed with produce (not only to tenant admins)."""
    name = unique("http-lookup")
    admin = node.http("admin")
    admin.ok("POST", f"/admin/v2/persistent/acme/ns/{name}/permissions/carol", ["produce"])
    client = pulsar.Client(
        node.server.http_url,
        authentication=pulsar.AuthenticationToken(node.tokens["carol"]),
        operation_timeout_seconds=5,
        logger=QUIET,
    )
    try:
        client.create_producer(topic(name)).send(b"over http lookup")
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic(unique("not-granted")))
    finally:
        client.close()
