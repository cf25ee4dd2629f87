"""The admin REST API (Pulsar's /admin/v2 paths) driven with plain urllib against a real
standalone: tenants, namespaces, topics, subscriptions, stats, lookup and /docs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import (
    NO_BODY,
    AdminHttp,
    backlog,
    http_client,
    run_standalone,
    store_snapshot,
    unique,
    wait_until,
)

RECEIVE_MS = 10_000


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Small segments (10 entries) so internal-stats shows several."""
    yield from run_standalone(tmp_path_factory, "--segment-max-entries", "10")


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


@pytest.fixture
def ns(admin: AdminHttp) -> str:
    """A fresh ``tenant/namespace`` for one test."""
    tenant, namespace = unique("tenant"), unique("ns")
    admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": []})
    admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/{namespace}")
    return f"{tenant}/{namespace}"


def produce(client: pulsar.Client, topic: str, payloads: list[bytes]) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        return [producer.send(p) for p in payloads]
    finally:
        producer.close()


def receive(consumer: pulsar.Consumer, n: int, *, ack: bool = True) -> list[bytes]:
    out = []
    for _ in range(n):
        msg = consumer.receive(RECEIVE_MS)
        if ack:
            consumer.acknowledge(msg)
        out.append(msg.data())
    return out


# -- lookup over HTTP --------------------------------------------------------------------------


def test_pulsar_client_with_http_service_url_produces_and_consumes(
    standalone: StandaloneProcess, admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic = f"persistent://{ns}/lookup"
    lookup = admin.get(f"/lookup/v2/topic/persistent/{ns}/lookup")
    assert lookup["brokerUrl"] == standalone.pulsar_url
    consumer = client.subscribe(topic, "sub")
    produce(client, topic, [b"one", b"two", b"three"])
    assert receive(consumer, 3) == [b"one", b"two", b"three"]
    consumer.close()
    assert admin.get(f"/admin/v2/persistent/{ns}")[0] == topic


# -- tenants and namespaces ----------------------------------------------------------------------


def test_tenant_and_namespace_lifecycle(admin: AdminHttp) -> None:
    tenant = unique("life")
    info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    admin.ok("PUT", f"/admin/v2/tenants/{tenant}", info)
    assert tenant in admin.get("/admin/v2/tenants")
    assert admin.get(f"/admin/v2/tenants/{tenant}") == info
    assert "already exists" in admin.refused("PUT", f"/admin/v2/tenants/{tenant}", info).reason
    admin.ok("POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["dev"]})
    assert admin.get(f"/admin/v2/tenants/{tenant}")["adminRoles"] == ["dev"]

    admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/a")
    admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/b", {"message_ttl_in_seconds": 30})
    assert admin.get(f"/admin/v2/namespaces/{tenant}") == [f"{tenant}/a", f"{tenant}/b"]
    assert admin.get(f"/admin/v2/namespaces/{tenant}/b")["message_ttl_in_seconds"] == 30
    assert admin.refused("PUT", f"/admin/v2/namespaces/{tenant}/a").status == 409

    admin.ok("DELETE", f"/admin/v2/namespaces/{tenant}/a")
    admin.ok("DELETE", f"/admin/v2/namespaces/{tenant}/b")
    admin.ok("DELETE", f"/admin/v2/tenants/{tenant}")
    assert tenant not in admin.get("/admin/v2/tenants")
    assert admin.refused("GET", f"/admin/v2/tenants/{tenant}").status == 404


def test_topic_creation_in_a_missing_tenant_or_namespace_is_refused(
    admin: AdminHttp, ns: str
) -> None:
    tenant = ns.split("/")[0]
    tenants = admin.get("/admin/v2/tenants")
    missing_tenant = admin.refused("PUT", "/admin/v2/persistent/no-such-tenant/ns/t")
    assert missing_tenant.status == 404 and "tenant 'no-such-tenant'" in missing_tenant.reason
    missing_ns = admin.refused("PUT", f"/admin/v2/persistent/{tenant}/no-such-ns/t")
    assert missing_ns.status == 404 and f"namespace {tenant}/no-such-ns" in missing_ns.reason
    partitioned = admin.refused("PUT", f"/admin/v2/persistent/{tenant}/no-such-ns/p/partitions", 2)
    assert partitioned.status == 404
    assert admin.get("/admin/v2/tenants") == tenants
    assert admin.get(f"/admin/v2/namespaces/{tenant}") == [ns]


def test_non_empty_namespace_and_tenant_cannot_be_deleted(admin: AdminHttp, ns: str) -> None:
    tenant = ns.split("/")[0]
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/keep")
    refused_ns = admin.refused("DELETE", f"/admin/v2/namespaces/{ns}")
    assert refused_ns.status == 409 and "still has 1 topic" in refused_ns.reason
    refused_tenant = admin.refused("DELETE", f"/admin/v2/tenants/{tenant}")
    assert refused_tenant.status == 409 and "still has namespaces" in refused_tenant.reason
    assert admin.get(f"/admin/v2/persistent/{ns}") == [f"persistent://{ns}/keep"]
    assert admin.get(f"/admin/v2/namespaces/{tenant}") == [ns]

    admin.ok("DELETE", f"/admin/v2/persistent/{ns}/keep")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    assert admin.refused("DELETE", f"/admin/v2/namespaces/{ns}").status == 409
    admin.ok("DELETE", f"/admin/v2/persistent/{ns}/parted/partitions")
    admin.ok("DELETE", f"/admin/v2/namespaces/{ns}")
    admin.ok("DELETE", f"/admin/v2/tenants/{tenant}")


def test_tenants_and_namespaces_are_isolated(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    tenant = ns.split("/")[0]
    sibling = f"{tenant}/{unique('sibling')}"
    other_tenant = unique("other")
    same_name = f"{other_tenant}/{ns.split('/')[1]}"  # same namespace name, other tenant
    admin.ok("PUT", f"/admin/v2/namespaces/{sibling}")
    admin.ok("PUT", f"/admin/v2/tenants/{other_tenant}", {})
    admin.ok("PUT", f"/admin/v2/namespaces/{same_name}")

    produce(client, f"persistent://{ns}/orders", [b"a", b"b"])
    admin.ok("PUT", f"/admin/v2/persistent/{same_name}/orders")

    assert admin.get(f"/admin/v2/persistent/{ns}") == [f"persistent://{ns}/orders"]
    assert admin.get(f"/admin/v2/persistent/{sibling}") == []
    assert admin.get(f"/admin/v2/namespaces/{ns}/topics") == [f"persistent://{ns}/orders"]
    assert admin.get(f"/admin/v2/persistent/{same_name}") == [f"persistent://{same_name}/orders"]
    assert admin.get(f"/admin/v2/namespaces/{other_tenant}") == [same_name]
    assert admin.get(f"/admin/v2/persistent/{ns}/orders/stats")["msgInCounter"] == 2
    assert admin.get(f"/admin/v2/persistent/{same_name}/orders/stats")["msgInCounter"] == 0


# -- topics --------------------------------------------------------------------------------------


def test_topic_create_list_delete(admin: AdminHttp, ns: str) -> None:
    path = f"/admin/v2/persistent/{ns}/plain"
    admin.ok("PUT", path)
    assert admin.refused("PUT", path).status == 409
    assert admin.get(f"/admin/v2/persistent/{ns}") == [f"persistent://{ns}/plain"]
    admin.ok("DELETE", path)
    assert admin.get(f"/admin/v2/persistent/{ns}") == []
    assert admin.refused("GET", path + "/stats").status == 404
    assert admin.refused("DELETE", path).status == 404


def test_topic_delete_is_refused_while_a_producer_is_connected(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    path = f"/admin/v2/persistent/{ns}/busy"
    producer = client.create_producer(f"persistent://{ns}/busy")
    refused = admin.refused("DELETE", path)
    assert refused.status == 412 and "force=true" in refused.reason
    assert admin.get(f"/admin/v2/persistent/{ns}") == [f"persistent://{ns}/busy"]
    admin.ok("DELETE", path + "?force=true")
    assert admin.get(f"/admin/v2/persistent/{ns}") == []
    producer.close()


def test_partitioned_topic_create_get_grow_delete(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    path = f"/admin/v2/persistent/{ns}/parted/partitions"
    name = f"persistent://{ns}/parted"
    admin.ok("PUT", path, 3)
    exists = admin.refused("PUT", path, 3)
    assert exists.status == 409 and "already exists" in exists.reason
    assert admin.refused("PUT", f"/admin/v2/persistent/{ns}/parted").status == 409
    assert admin.get(path) == {"partitions": 3}
    assert admin.get(f"/admin/v2/persistent/{ns}/partitioned") == [name]
    assert len(client.get_topic_partitions(name)) == 3

    admin.ok("POST", path, 5)
    assert admin.get(path) == {"partitions": 5}
    assert client.get_topic_partitions(name)[-1] == f"{name}-partition-4"
    shrink = admin.refused("POST", path, 4)
    assert shrink.status == 400 and "must be larger" in shrink.reason
    assert admin.get(path) == {"partitions": 5}

    admin.ok("DELETE", path)
    assert admin.get(f"/admin/v2/persistent/{ns}/partitioned") == []
    assert admin.refused("POST", path, 6).status == 404


def test_stats_show_publishers_subscriptions_backlog_and_consumers(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic, path = f"persistent://{ns}/stats", f"{ns}/stats"
    consumer = client.subscribe(topic, "watchers", consumer_name="watcher-1")
    producer = client.create_producer(topic, producer_name="writer-1", batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())

    stats = admin.get(f"/admin/v2/persistent/{path}/stats")
    assert [p["producerName"] for p in stats["publishers"]] == ["writer-1"]
    assert stats["publishers"][0]["msgCount"] == 5
    assert stats["msgInCounter"] == 5 and stats["storageSize"] > 0
    sub = stats["subscriptions"]["watchers"]
    assert sub["msgBacklog"] == 5 and sub["type"] == "Exclusive"
    assert [c["consumerName"] for c in sub["consumers"]] == ["watcher-1"]

    assert receive(consumer, 5) == [f"m{i}".encode() for i in range(5)]
    wait_until(lambda: backlog(admin, path, "watchers") == 0, "the acks to clear the backlog")
    producer.close()
    consumer.close()
    stats = admin.get(f"/admin/v2/persistent/{path}/stats")
    assert stats["publishers"] == [] and stats["subscriptions"]["watchers"]["consumers"] == []


def test_internal_stats_describe_segments_and_cursors(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic = f"persistent://{ns}/segmented"
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/segmented")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/segmented/subscription/readers")
    produce(client, topic, [f"m{i}".encode() for i in range(25)])
    stats = admin.get(f"/admin/v2/persistent/{ns}/segmented/internal-stats")
    ledgers = stats["ledgers"]
    assert [(s["firstOffset"], s["lastOffset"], s["entries"]) for s in ledgers] == [
        (0, 9, 10),
        (10, 19, 10),
        (20, 24, 5),
    ]
    assert [s["state"] for s in ledgers] == ["CLOSED", "CLOSED", "OPEN"]
    ids = [s["ledgerId"] for s in ledgers]
    assert ids == sorted(set(ids))
    assert all(s["size"] > 0 for s in ledgers)
    assert stats["totalSize"] == sum(s["size"] for s in ledgers)
    assert stats["entriesAddedCounter"] == 25
    assert stats["cursors"]["readers"]["markDeleteOffset"] == 0


def test_last_message_id_names_the_last_message(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    path = f"/admin/v2/persistent/{ns}/last/lastMessageId"
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/last")
    assert admin.get(path)["entryId"] == -1
    ids = produce(client, f"persistent://{ns}/last", [f"m{i}".encode() for i in range(12)])
    last = admin.get(path)
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())


# -- subscriptions -------------------------------------------------------------------------------


def test_subscriptions_created_at_earliest_latest_or_a_message_id(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic, path = f"persistent://{ns}/subs", f"{ns}/subs"
    sub = f"/admin/v2/persistent/{path}/subscription"
    ids = produce(client, topic, [b"m0", b"m1", b"m2", b"m3"])
    admin.ok("PUT", f"{sub}/from-start?messageId=earliest")
    admin.ok("PUT", f"{sub}/from-now")
    third = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}
    admin.ok("PUT", f"{sub}/from-third", third)
    assert admin.get(f"/admin/v2/persistent/{path}/subscriptions") == [
        "from-now",
        "from-start",
        "from-third",
    ]
    assert backlog(admin, path, "from-start") == 4
    assert backlog(admin, path, "from-now") == 0
    assert backlog(admin, path, "from-third") == 2
    assert admin.refused("PUT", f"{sub}/from-now").status == 409

    consumer = client.subscribe(topic, "from-third")
    assert receive(consumer, 2) == [b"m2", b"m3"]
    consumer.close()
    latest = client.subscribe(topic, "from-now")
    produce(client, topic, [b"m4"])
    assert receive(latest, 1) == [b"m4"]
    latest.close()


def test_subscription_delete_needs_force_while_a_consumer_is_connected(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic, path = f"persistent://{ns}/unsub", f"/admin/v2/persistent/{ns}/unsub"
    consumer = client.subscribe(topic, "busy")
    refused = admin.refused("DELETE", f"{path}/subscription/busy")
    assert refused.status == 412 and "1 connected consumer" in refused.reason
    assert admin.get(f"{path}/subscriptions") == ["busy"]
    admin.ok("DELETE", f"{path}/subscription/busy?force=true")
    assert admin.get(f"{path}/subscriptions") == []
    assert admin.refused("DELETE", f"{path}/subscription/busy").status == 404
    consumer.close()


def test_skip_and_skip_all_move_the_cursor(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic, path = f"persistent://{ns}/skips", f"{ns}/skips"
    sub = f"/admin/v2/persistent/{path}/subscription/sub"
    admin.ok("PUT", f"/admin/v2/persistent/{path}")
    admin.ok("PUT", f"{sub}?messageId=earliest")
    produce(client, topic, [f"m{i}".encode() for i in range(10)])
    admin.ok("POST", f"{sub}/skip/3")
    assert backlog(admin, path, "sub") == 7

    consumer = client.subscribe(topic, "sub")
    assert receive(consumer, 7, ack=False)[0] == b"m3"
    admin.ok("POST", f"{sub}/skip_all")
    stats = admin.get(f"/admin/v2/persistent/{path}/stats")["subscriptions"]["sub"]
    assert stats["msgBacklog"] == 0
    assert stats["unackedMessages"] == 0  # deliveries held by the consumer are settled too
    consumer.close()


def test_reset_cursor_to_a_timestamp_redelivers_from_that_time(
    admin: AdminHttp, client: pulsar.Client, ns: str
) -> None:
    topic, path = f"persistent://{ns}/rewind", f"/admin/v2/persistent/{ns}/rewind"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"old-{i}".encode())
    received = [consumer.receive(RECEIVE_MS) for _ in range(3)]
    last_old = received[-1].publish_timestamp()
    # The next message must get a later millisecond than every old one.
    wait_until(lambda: time.time() * 1000 > last_old + 1, "the clock to pass the old messages")
    for i in range(3):
        producer.send(f"new-{i}".encode())
    received += [consumer.receive(RECEIVE_MS) for _ in range(3)]
    for msg in received:
        consumer.acknowledge(msg)
    wait_until(lambda: backlog(admin, f"{ns}/rewind", "sub") == 0, "the acks to land")

    since = received[3].publish_timestamp()
    admin.ok("POST", f"{path}/subscription/sub/resetcursor/{since}")
    assert backlog(admin, f"{ns}/rewind", "sub") == 3
    assert receive(consumer, 3) == [b"new-0", b"new-1", b"new-2"]
    producer.close()
    consumer.close()


# -- /docs ---------------------------------------------------------------------------------------


def test_docs_serve_an_openapi_document_of_the_admin_paths(admin: AdminHttp) -> None:
    doc = admin.get("/docs")
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    expected = {
        "/admin/v2/tenants": {"get"},
        "/admin/v2/tenants/{tenant}": {"get", "put", "post", "delete"},
        "/admin/v2/namespaces/{tenant}/{namespace}": {"get", "put", "delete"},
        "/admin/v2/namespaces/{tenant}/{namespace}/retention": {"get", "post", "delete"},
        "/admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy": {"get", "put"},
        t: {"put", "delete"},
        t + "/partitions": {"get", "put", "post", "delete"},
        t + "/stats": {"get"},
        t + "/internal-stats": {"get"},
        t + "/subscription/{subscription}": {"put", "delete"},
        t + "/subscription/{subscription}/resetcursor/{timestamp}": {"post"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
    params = paths[t + "/stats"]["get"]["parameters"]
    assert [p["name"] for p in params] == ["tenant", "namespace", "topic"]


# -- bad input: refused with a 4xx and a reason, and nothing changes -----------------------------

NS = "/admin/v2/namespaces/{ns}"
X = "/admin/v2/persistent/{ns}/x"  # an existing topic, with subscription "s"
P = "/admin/v2/persistent/{ns}/p"  # an existing partitioned topic, 2 partitions
NEW = "/admin/v2/persistent/{ns}/fresh"  # a topic that does not exist

# (method, path, body, status, what the reason must say); MALFORMED bodies are raw bytes
Case = tuple[str, str, Any, int, str]
MALFORMED: list[Case] = [
    ("PUT", "/admin/v2/tenants/fresh-tenant", b"{bad", 400, "malformed JSON"),
    ("POST", "/admin/v2/tenants/{t}", b'{"adminRoles": [', 400, "malformed JSON"),
    ("PUT", "/admin/v2/namespaces/{t}/fresh-ns", b"[1,", 400, "malformed JSON"),
    ("POST", NS + "/retention", b'{"retentionTimeInMinutes": 1,', 400, "malformed JSON"),
    ("PUT", NS + "/schemaCompatibilityStrategy", b"BACKWARD", 400, "malformed JSON"),
    ("POST", NS + "/deduplication", b"yes", 400, "malformed JSON"),
    ("PUT", NEW + "/partitions", b"three", 400, "malformed JSON"),
    ("POST", P + "/partitions", b"", 400, "needs a JSON body"),
    ("PUT", X + "/subscription/fresh-sub", b"{", 400, "malformed JSON"),
]

UNKNOWN: list[Case] = [
    ("GET", "/admin/v2/tenants/no-such", None, 404, "tenant 'no-such' does not exist"),
    ("POST", "/admin/v2/tenants/no-such", {}, 404, "tenant 'no-such' does not exist"),
    ("DELETE", "/admin/v2/tenants/no-such", None, 404, "tenant 'no-such' does not exist"),
    ("GET", "/admin/v2/namespaces/no-such", None, 404, "tenant 'no-such'"),
    ("PUT", "/admin/v2/namespaces/no-such/ns", None, 404, "tenant 'no-such'"),
    ("GET", "/admin/v2/namespaces/{t}/no-such", None, 404, "namespace {t}/no-such"),
    ("DELETE", "/admin/v2/namespaces/{t}/no-such", None, 404, "namespace {t}/no-such"),
    ("POST", "/admin/v2/namespaces/{t}/no-such/messageTTL", 5, 404, "namespace {t}/no-such"),
    ("GET", "/admin/v2/persistent/{t}/no-such", None, 404, "namespace {t}/no-such"),
    ("PUT", "/admin/v2/persistent/no-such/ns/x", None, 404, "tenant 'no-such'"),
    ("GET", NEW + "/stats", None, 404, "topic persistent://{ns}/fresh does not exist"),
    ("GET", NEW + "/internal-stats", None, 404, "does not exist"),
    ("GET", NEW + "/lastMessageId", None, 404, "does not exist"),
    ("GET", NEW + "/subscriptions", None, 404, "does not exist"),
    ("DELETE", NEW, None, 404, "does not exist"),
    ("PUT", NEW + "/subscription/s", None, 404, "topic persistent://{ns}/fresh"),
    ("POST", NEW + "/partitions", 4, 404, "partitioned topic persistent://{ns}/fresh"),
    ("DELETE", NEW + "/partitions", None, 404, "partitioned topic"),
    ("DELETE", X + "/subscription/no-such", None, 404, "subscription 'no-such'"),
    ("POST", X + "/subscription/no-such/skip/1", None, 404, "subscription 'no-such'"),
    ("POST", X + "/subscription/no-such/skip_all", None, 404, "subscription 'no-such'"),
    ("POST", X + "/subscription/no-such/resetcursor/0", None, 404, "subscription 'no-such'"),
    ("GET", "/admin/v2/no-such-call", None, 404, "Not Found"),
    ("PATCH", "/admin/v2/tenants", None, 405, "Method Not Allowed"),
]

INVALID: list[Case] = [
    ("PUT", "/admin/v2/tenants/fresh-tenant", [1], 400, "tenant info must be a JSON object"),
    ("PUT", "/admin/v2/tenants/fresh-tenant", {"adminRoles": "root"}, 400, "list of at most"),
    ("POST", "/admin/v2/tenants/{t}", {"allowedClusters": [7]}, 400, "list of at most"),
    ("PUT", NEW + "/partitions", 0, 406, "Number of partitions should be more than 0"),
    ("PUT", NEW + "/partitions", -1, 406, "Number of partitions should be more than 0"),
    ("PUT", NEW + "/partitions", "3", 400, "partitions must be an integer >= 1"),
    ("PUT", NEW + "/partitions", True, 400, "partitions must be an integer >= 1"),
    ("PUT", P + "/partitions", 2, 409, "already exists"),
    ("PUT", X, None, 409, "already exists"),
    ("POST", P + "/partitions", 2, 400, "has 2 partitions; the new count must be larger"),
    ("PUT", X + "/subscription/s", None, 409, "subscription 's' of"),
    ("PUT", X + "/subscription/t", {"ledgerId": "x", "entryId": 1}, 400, "with integers"),
    ("PUT", X + "/subscription/t", [1, 2], 400, "position must be"),
    ("PUT", X + "/subscription/t?messageId=soon", None, 400, "?messageId=earliest|latest"),
    ("POST", X + "/subscription/s/skip/-1", None, 400, "negative number"),
    ("POST", X + "/subscription/s/skip/abc", None, 400, "skip count must be an integer"),
    ("POST", X + "/subscription/s/resetcursor/yesterday", None, 400, "epoch milliseconds"),
]

ILLEGAL_NAMES: list[Case] = [
    ("PUT", "/admin/v2/tenants/bad%20name", None, 412, "invalid tenant name 'bad name'"),
    ("PUT", "/admin/v2/tenants/bad!name", None, 412, "invalid tenant name 'bad!name'"),
    ("PUT", "/admin/v2/tenants/caf%C3%A9", None, 412, "invalid tenant name 'café'"),
    ("PUT", "/admin/v2/namespaces/{t}/a@b", None, 412, "invalid namespace name 'a@b'"),
    ("PUT", "/admin/v2/persistent/{ns}/a%20b", None, 412, "invalid topic name 'a b'"),
    ("PUT", "/admin/v2/persistent/{ns}/a*b/partitions", 2, 412, "invalid topic name 'a*b'"),
    ("PUT", X + "/subscription/a%23b", None, 412, "invalid subscription name 'a#b'"),
]


@pytest.fixture(scope="module")
def world(admin: AdminHttp) -> str:
    """A tenant/namespace holding topic ``x`` (subscription ``s``) and partitioned ``p``."""
    ns = f"{unique('world')}/w"
    admin.ok("PUT", f"/admin/v2/tenants/{ns.split('/')[0]}", {})
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/x")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/x/subscription/s?messageId=earliest")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/p/partitions", 2)
    return ns


def _ids(cases: list[Case]) -> list[str]:
    return [f"{method} {path}" for method, path, *_ in cases]


def assert_refused_and_unchanged(
    admin: AdminHttp, world: str, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    """``body``: bytes go as they are, None sends no body, anything else goes as JSON."""
    names = {"ns": world, "t": world.split("/")[0]}
    url = path.format(**names)
    before = store_snapshot(admin, world, "x")
    if isinstance(body, bytes):
        reply = admin.refused(method, url, raw=body)
    else:
        reply = admin.refused(method, url, NO_BODY if body is None else body)
    assert reply.status == status, reply
    assert fragment.format(**names) in reply.reason
    assert store_snapshot(admin, world, "x") == before


ARGS = ("method", "path", "body", "status", "fragment")


@pytest.mark.parametrize(ARGS, MALFORMED, ids=_ids(MALFORMED))
def test_malformed_json_is_refused_and_changes_nothing(
    admin: AdminHttp, world: str, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    assert_refused_and_unchanged(admin, world, method, path, body, status, fragment)


@pytest.mark.parametrize(ARGS, UNKNOWN, ids=_ids(UNKNOWN))
def test_unknown_tenant_namespace_topic_or_subscription_is_refused(
    admin: AdminHttp, world: str, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    assert_refused_and_unchanged(admin, world, method, path, body, status, fragment)


@pytest.mark.parametrize(ARGS, INVALID, ids=_ids(INVALID))
def test_invalid_values_are_refused_and_change_nothing(
    admin: AdminHttp, world: str, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    assert_refused_and_unchanged(admin, world, method, path, body, status, fragment)


@pytest.mark.parametrize(ARGS, ILLEGAL_NAMES, ids=_ids(ILLEGAL_NAMES))
def test_names_with_illegal_characters_are_refused_and_change_nothing(
    admin: AdminHttp, world: str, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    assert_refused_and_unchanged(admin, world, method, path, body, status, fragment)
