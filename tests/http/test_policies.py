"""Namespace policies set over the REST API take effect on a real standalone: retention,
message TTL, deduplication and schema compatibility; invalid values are refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from pulsar.schema import Integer, JsonSchema, Record, String

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import (
    AdminHttp,
    backlog,
    http_client,
    run_standalone,
    segments,
    store_snapshot,
    unique,
    wait_until,
)

RECEIVE_MS = 10_000


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Segments of 10 entries and a retention/TTL sweep every 0.2 s."""
    yield from run_standalone(
        tmp_path_factory, "--segment-max-entries", "10", "--retention-check-interval", "0.2"
    )


@pytest.fixture(scope="module")
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


@pytest.fixture(scope="module")
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = http_client(standalone)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def tenant(admin: AdminHttp) -> str:
    name = unique("policies")
    admin.ok("PUT", f"/admin/v2/tenants/{name}", {})
    return name


def namespace(admin: AdminHttp, tenant: str, **policies: Any) -> str:
    """A fresh namespace of ``tenant`` with each policy set through its own call."""
    ns = f"{tenant}/{unique('ns')}"
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    for suffix, value in policies.items():
        method = "PUT" if suffix == "schemaCompatibilityStrategy" else "POST"
        admin.ok(method, f"/admin/v2/namespaces/{ns}/{suffix}", value)
        assert admin.get(f"/admin/v2/namespaces/{ns}/{suffix}") == value
    return ns


def retention(minutes: int, size_mb: int) -> dict[str, int]:
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}


def produce(client: pulsar.Client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"m{i:02d}".encode())
    producer.close()


def offsets(admin: AdminHttp, path: str) -> list[tuple[int, int]]:
    return [(s["firstOffset"], s["lastOffset"]) for s in segments(admin, path)]


def consume_everything(admin: AdminHttp, client: pulsar.Client, path: str, n: int) -> None:
    """Produce ``n`` messages to ``path``, consume and acknowledge them, until the broker
    shows no backlog."""
    topic = f"persistent://{path}"
    consumer = client.subscribe(topic, "sub")
    produce(client, topic, n)
    for _ in range(n):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    wait_until(lambda: backlog(admin, path, "sub") == 0, f"the acks on {path} to land")
    consumer.close()


# -- retention -----------------------------------------------------------------------------------


def test_retention_deletes_consumed_segments_beyond_it_and_nothing_within_it(
    admin: AdminHttp, client: pulsar.Client, tenant: str
) -> None:
    all_segments = [(0, 9), (10, 19), (20, 24)]
    keepers = {
        "unlimited": namespace(admin, tenant, retention=retention(-1, -1)),
        "ten-minutes": namespace(admin, tenant, retention=retention(10, -1)),
        "one-megabyte": namespace(admin, tenant, retention=retention(-1, 1)),
    }
    for ns in keepers.values():
        consume_everything(admin, client, f"{ns}/kept", 25)

    trimmed = namespace(admin, tenant, retention=retention(0, 0))
    path, topic = f"{trimmed}/trimmed", f"persistent://{trimmed}/trimmed"
    consumer = client.subscribe(topic, "sub")
    produce(client, topic, 25)
    received = [consumer.receive(RECEIVE_MS) for _ in range(25)]
    for msg in received[:15]:  # the first segment fully, the second only half
        consumer.acknowledge(msg)
    wait_until(lambda: offsets(admin, path)[0] == (10, 19), "the consumed segment to go")
    assert offsets(admin, path) == all_segments[1:]  # half-acknowledged: kept

    for msg in received[15:]:
        consumer.acknowledge(msg)
    wait_until(lambda: offsets(admin, path) == [(20, 24)], "the second segment to go")
    assert [s["state"] for s in segments(admin, path)] == ["OPEN"]  # never the open one
    admin.ok("PUT", f"/admin/v2/persistent/{path}/subscription/late?messageId=earliest")
    assert backlog(admin, path, "late") == 5  # what retention deleted is gone for good
    consumer.close()

    # The sweeps that trimmed that topic started after it existed, so after every keeper's
    # acks had landed: they kept everything within the keepers' retention.
    for label, ns in keepers.items():
        assert offsets(admin, f"{ns}/kept") == all_segments, label


# -- message TTL ---------------------------------------------------------------------------------


def test_message_ttl_expires_unacknowledged_messages(
    admin: AdminHttp, client: pulsar.Client, tenant: str
) -> None:
    expiring = namespace(admin, tenant, messageTTL=1)
    lasting = namespace(admin, tenant)
    for ns in (lasting, expiring):
        admin.ok("PUT", f"/admin/v2/persistent/{ns}/ttl")
        admin.ok("PUT", f"/admin/v2/persistent/{ns}/ttl/subscription/idle?messageId=earliest")
        produce(client, f"persistent://{ns}/ttl", 5)
    assert backlog(admin, f"{lasting}/ttl", "idle") == 5
    wait_until(lambda: backlog(admin, f"{expiring}/ttl", "idle") == 0, "the TTL to expire")
    assert backlog(admin, f"{lasting}/ttl", "idle") == 5  # no TTL: nothing expires


# -- deduplication -------------------------------------------------------------------------------


def dedup_status(admin: AdminHttp, path: str) -> str:
    return str(admin.get(f"/admin/v2/persistent/{path}/stats")["deduplicationStatus"])


def test_deduplication_policy_toggles_broker_deduplication(
    admin: AdminHttp, client: pulsar.Client, tenant: str
) -> None:
    ns = namespace(admin, tenant)
    path, topic = f"{ns}/dedup", f"persistent://{ns}/dedup"
    admin.ok("PUT", f"/admin/v2/persistent/{path}")
    assert dedup_status(admin, path) == "Disabled"
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    assert admin.get(f"/admin/v2/namespaces/{ns}/deduplication") is True
    wait_until(lambda: dedup_status(admin, path) == "Enabled", "dedup to be enabled")

    producer = client.create_producer(topic, producer_name="fixed", batching_enabled=False)
    for seq in range(3):
        producer.send(f"m{seq}".encode(), sequence_id=seq)
    producer.send(b"m1-again", sequence_id=1)  # a resend of an old sequence id
    producer.close()
    assert admin.get(f"/admin/v2/persistent/{path}/stats")["msgInCounter"] == 3

    admin.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", False)
    wait_until(lambda: dedup_status(admin, path) == "Disabled", "dedup to be disabled")
    producer = client.create_producer(topic, producer_name="fixed", batching_enabled=False)
    producer.send(b"m1-stored", sequence_id=1)  # with dedup off the broker stores it
    producer.close()

    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    payloads = [consumer.receive(RECEIVE_MS).data() for _ in range(4)]
    assert payloads == [b"m0", b"m1", b"m2", b"m1-stored"]
    consumer.close()


# -- schema compatibility ------------------------------------------------------------------------


class Person(Record):
    name = String()


class PersonWithAge(Record):  # adds a field with a default: BACKWARD compatible
    name = String()
    age = Integer(required_default=True)


class Account(Record):  # needs a field old data lacks: not BACKWARD compatible
    number = Integer(required=True)


def test_schema_compatibility_strategy_is_enforced(
    admin: AdminHttp, client: pulsar.Client, tenant: str
) -> None:
    ns = namespace(admin, tenant, schemaCompatibilityStrategy="ALWAYS_INCOMPATIBLE")
    topic = f"persistent://{ns}/people"
    first = client.create_producer(topic, schema=JsonSchema(Person))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(PersonWithAge))

    admin.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "BACKWARD")
    assert admin.get(f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy") == "BACKWARD"
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(Account))
    second = client.create_producer(topic, schema=JsonSchema(PersonWithAge))

    consumer = client.subscribe(
        topic,
        "readers",
        schema=JsonSchema(PersonWithAge),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    first.send(Person(name="ada"))
    second.send(PersonWithAge(name="alan", age=41))
    got = [consumer.receive(RECEIVE_MS).value() for _ in range(2)]
    assert [(p.name, p.age) for p in got] == [("ada", None), ("alan", 41)]
    consumer.close()
    first.close()
    second.close()


# -- get / set / remove, and invalid values ------------------------------------------------------

# (path suffix, write method, value, value read back after DELETE)
ROUND_TRIPS = [
    ("retention", "POST", retention(60, 512), None),
    ("messageTTL", "POST", 120, None),
    ("deduplication", "POST", True, None),
    ("schemaCompatibilityStrategy", "PUT", "FORWARD_TRANSITIVE", "UNDEFINED"),
    ("offloadThreshold", "PUT", 1 << 30, -1),
    ("offloadDeletionLagMs", "PUT", 60_000, None),
]


@pytest.mark.parametrize(
    ("suffix", "method", "value", "cleared"), ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS]
)
def test_policy_set_get_remove(
    admin: AdminHttp, tenant: str, suffix: str, method: str, value: object, cleared: object
) -> None:
    ns = namespace(admin, tenant)
    path = f"/admin/v2/namespaces/{ns}/{suffix}"
    admin.ok(method, path, value)
    assert admin.get(path) == value
    admin.ok("DELETE", path)
    assert admin.get(path) == cleared


def test_backlog_quota_round_trip(admin: AdminHttp, tenant: str) -> None:
    ns = namespace(admin, tenant)
    quota = {"limitSize": 1 << 20, "limitTime": -1, "policy": "producer_exception"}
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/backlogQuota", quota)
    assert admin.get(f"/admin/v2/namespaces/{ns}/backlogQuotaMap") == {"destination_storage": quota}


# (method, path suffix of the namespace ("" = the namespace itself), body, reason fragment)
INVALID_POLICIES = [
    ("POST", "/retention", retention(-2, 10), "retentionTimeInMinutes must be an integer >= -1"),
    ("POST", "/retention", retention(10, -5), "retentionSizeInMB must be an integer >= -1"),
    ("POST", "/retention", {"retentionTimeInMinutes": "1h"}, "got '1h'"),
    ("POST", "/retention", {"retentionSizeInMB": 1.5}, "retentionSizeInMB"),
    ("POST", "/retention", 10, "retention must be"),
    ("POST", "/messageTTL", -1, "messageTTL must be an integer >= 0"),
    ("POST", "/messageTTL", "60", "messageTTL must be an integer"),
    ("POST", "/messageTTL", True, "messageTTL must be an integer"),
    ("POST", "/deduplication", "yes", "deduplication must be true or false"),
    ("POST", "/deduplication", 1, "deduplication must be true or false"),
    ("PUT", "/schemaCompatibilityStrategy", "SIDEWAYS", "unknown schema compatibility strategy"),
    ("PUT", "/schemaCompatibilityStrategy", 3, "use one of UNDEFINED"),
    ("PUT", "/offloadThreshold", -2, "offloadThreshold must be an integer >= -1"),
    ("PUT", "/offloadDeletionLagMs", -1, "offloadDeletionLagMs must be an integer >= 0"),
    ("POST", "/backlogQuota", {"limitSize": -3}, "limitSize must be an integer >= -1"),
    ("POST", "/backlogQuota", {"policy": "drop_everything"}, "unknown backlog quota policy"),
    ("POST", "/backlogQuota", [], "backlog quota must be a JSON object"),
]

# Policies given when a namespace is created get the same checks.
INVALID_CREATION = [
    ({"retention_policies": 5}, "retention must be"),
    ({"retention_policies": retention(-7, 0)}, "retentionTimeInMinutes"),
    ({"schema_compatibility_strategy": "NOPE"}, "unknown schema compatibility strategy"),
    ({"message_ttl_in_seconds": -4}, "messageTTL must be an integer >= 0"),
    ({"deduplicationEnabled": "on"}, "deduplication must be true or false"),
    ({"backlog_quota_map": {"somewhere": {}}}, "destination_storage"),
    ([1, 2], "namespace policies must be a JSON object"),
]


@pytest.fixture(scope="module")
def configured(admin: AdminHttp, tenant: str) -> str:
    """A namespace with every policy set, so a refused change would show."""
    return namespace(
        admin,
        tenant,
        retention=retention(5, 5),
        messageTTL=30,
        deduplication=False,
        schemaCompatibilityStrategy="FULL",
    )


@pytest.mark.parametrize(
    ("method", "suffix", "body", "fragment"),
    INVALID_POLICIES,
    ids=[f"{m} {s} {b!r}" for m, s, b, _ in INVALID_POLICIES],
)
def test_invalid_policy_values_are_refused_and_change_nothing(
    admin: AdminHttp, configured: str, method: str, suffix: str, body: object, fragment: str
) -> None:
    before = store_snapshot(admin, configured)
    reply = admin.refused(method, f"/admin/v2/namespaces/{configured}{suffix}", body)
    assert reply.status == 400
    assert fragment in reply.reason
    assert store_snapshot(admin, configured) == before


@pytest.mark.parametrize(
    ("body", "fragment"), INVALID_CREATION, ids=[repr(b) for b, _ in INVALID_CREATION]
)
def test_invalid_policies_at_namespace_creation_are_refused(
    admin: AdminHttp, configured: str, tenant: str, body: object, fragment: str
) -> None:
    before = store_snapshot(admin, configured)
    reply = admin.refused("PUT", f"/admin/v2/namespaces/{tenant}/refused", body)
    assert reply.status == 400
    assert fragment in reply.reason
    assert store_snapshot(admin, configured) == before  # no namespace "refused" appeared
    assert admin.refused("GET", f"/admin/v2/namespaces/{tenant}/refused").status == 404
