"""Kafka's ``allow.everyone.if.no.acl.found``: authorization on without authentication, the
clients ANONYMOUS; a resource nobody holds a grant on is open, one with grants is checked.
Real clients: confluent-kafka (produce, ACL admin), pulsar-client, HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from magnetar.core.config import Settings
from magnetar.core.errors import ConfigError
from magnetar.standalone import _authorizer
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp
from tests.kafka.conftest import RawKafka
from tests.kafka.test_leader_epochs import epoch_ends

TOPIC_AUTHORIZATION_FAILED = 29
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    proc = StandaloneProcess(
        tmp_path_factory.mktemp("open") / "data",
        extra_args=["--authorization-enabled", "true", "--allow-everyone-if-no-acl-found", "true"],
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def produce_error(server: StandaloneProcess, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1, "no delivery report"
    return errors[0]


def acl(topic: str, kind: type[AclBinding] = AclBinding) -> AclBinding:
    return kind(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip


def test_an_acl_closes_its_topic_to_everyone_else(server: StandaloneProcess) -> None:
    granted, other = f"closed-{uuid.uuid4().hex[:8]}", f"open-{uuid.uuid4().hex[:8]}"
    assert produce_error(server, granted) is None  # nobody holds anything: open
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
    for future in admin.create_acls([acl(granted)]).values():
        future.result(timeout=15)  # ANONYMOUS manages ACLs: tenant public has no admin roles
    refused = produce_error(server, granted)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(server, other) is None
    raw = RawKafka(server.kafka_port)  # OffsetForLeaderEpoch needs consume, as Fetch does
    try:
        assert epoch_ends(raw, granted, [(0, 0)]) == [(0, TOPIC_AUTHORIZATION_FAILED, -1, -1)]
        assert epoch_ends(raw, other, [(0, 0)]) == [(0, 0, 0, 1)]
    finally:
        raw.close()
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            granted,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=15)
    assert [(b.principal, b.operation) for b in described] == [("User:bob", AclOperation.WRITE)]
    for future in admin.delete_acls([acl(granted, AclBindingFilter)]).values():
        assert len(future.result(timeout=15)) == 1
    assert produce_error(server, granted) is None


def test_pulsar_anonymous_is_checked_the_same_way(server: StandaloneProcess) -> None:
    local = f"pulsar-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(server.pulsar_url, logger=QUIET)
    try:
        client.create_producer(f"persistent://public/default/{local}").send(b"open")
        http = AdminHttp(server.http_url)
        http.ok("POST", f"/admin/v2/persistent/public/default/{local}/permissions/bob", ["produce"])
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(f"persistent://public/default/{local}")
    finally:
        client.close()


def test_a_tenant_with_admin_roles_is_closed_to_anonymous(server: StandaloneProcess) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    http = AdminHttp(server.http_url)
    http.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": []})
    http.ok("PUT", f"/admin/v2/namespaces/{tenant}/a")  # no admin roles: open
    http.ok("POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["alice"], "allowedClusters": []})
    reply = http.refused("PUT", f"/admin/v2/namespaces/{tenant}/b")
    assert reply.status == 403 and "'ANONYMOUS' is not an admin" in reply.reason


def test_authorization_without_authentication_needs_the_setting() -> None:
    with pytest.raises(ConfigError, match="allow_everyone_if_no_acl_found"):
        _authorizer(Settings(authorization_enabled=True), None)  # type: ignore[arg-type]
