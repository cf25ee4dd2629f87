"""Every REST call that takes a body refuses a malformed one with a 4xx and a reason, and
changes nothing (issue 21 item 5): bodies nested 100,000 deep, not UTF-8, NaN, cut short or
over the size bound, and bodies of the wrong JSON type or out of range for each endpoint.
The server answers a normal request afterwards and logged no traceback."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, run_standalone, store_snapshot, unique

INT = 2**31 - 1  # Pulsar's int fields
LONG = 2**63 - 1  # Pulsar's long fields

NS = "/admin/v2/namespaces/{ns}"
X = "/admin/v2/persistent/{ns}/x"  # an existing topic, with subscription "s"
P = "/admin/v2/persistent/{ns}/p"  # an existing partitioned topic, 2 partitions

# Every (method, path) that reads a body.
ENDPOINTS: list[tuple[str, str]] = [
    ("PUT", "/admin/v2/tenants/fresh-tenant"),
    ("POST", "/admin/v2/tenants/{t}"),
    ("PUT", "/admin/v2/namespaces/{t}/fresh-ns"),
    ("POST", NS + "/retention"),
    ("POST", NS + "/messageTTL"),
    ("POST", NS + "/deduplication"),
    ("PUT", NS + "/schemaCompatibilityStrategy"),
    ("PUT", NS + "/offloadThreshold"),
    ("PUT", NS + "/offloadThresholdInSeconds"),
    ("PUT", NS + "/offloadDeletionLagMs"),
    *[("POST", NS + suffix) for suffix in ("/schemaCompatibilityStrategy", "/offloadThreshold")],
    *[("POST", NS + s) for s in ("/offloadThresholdInSeconds", "/offloadDeletionLagMs")],
    ("POST", NS + "/backlogQuota"),
    ("POST", NS + "/persistence"),
    ("POST", NS + "/delayedDelivery"),
    ("POST", NS + "/icebergMaintenance"),
    ("PUT", NS + "/compactionThreshold"),
    ("POST", NS + "/compactionThreshold"),
    ("POST", NS + "/permissions/subscription/s"),
    ("POST", NS + "/permissions/some-role"),
    ("POST", X + "/permissions/some-role"),
    ("PUT", "/magnetar/v1/scram/some-user"),
    ("PUT", "/admin/v2/persistent/{ns}/fresh/partitions"),
    ("POST", P + "/partitions"),
    ("POST", X + "/deduplicationEnabled"),
    ("POST", X + "/retention"),
    ("POST", X + "/maxMessageSize"),
    ("POST", X + "/compactionThreshold"),
    ("PUT", X + "/subscription/fresh-sub"),
    ("PUT", X + "/offload"),
    ("POST", "/admin/v2/schemas/{ns}/x/schema"),
    ("POST", "/magnetar/v1/topics/{ns}/x/subscription/s/commit"),
    ("PUT", "/views/fresh_view"),
    ("POST", "/views/fresh_view/as-of"),
    ("POST", "/magnetar/v1/kafka/offsets"),
    ("POST", "/magnetar/v1/kafka/txn-markers"),
]

# (raw body, status, what the reason must say): refused the same way by every endpoint
MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("nested 100k deep", b"[" * 100_000 + b"]" * 100_000, 400, "nest 100000 deep"),
    ("objects nested", b'{"a":' * 50 + b"1" + b"}" * 50, 400, "nest 50 deep"),
    ("not UTF-8", b'{"adminRoles": ["\xff\xfe"]}', 400, "not UTF-8"),
    ("NaN", b"NaN", 400, "NaN is not a JSON number"),
    ("cut short", b'{"retentionTimeInMinutes": 1,', 400, "malformed JSON"),
    ("huge integer text", b"9" * 5000, 400, "malformed JSON"),
    ("over 1 MiB", b'"' + b"x" * (2 * 1024 * 1024) + b'"', 413, "the limit is 1048576 bytes"),
]

# (method, path, JSON body, status, what the reason must say): the wrong type or range
WRONG: list[tuple[str, str, Any, int, str]] = [
    ("PUT", "/admin/v2/tenants/fresh-tenant", None, 400, "tenant info must be a JSON object"),
    ("PUT", "/admin/v2/tenants/fresh-tenant", [], 400, "tenant info must be a JSON object"),
    ("PUT", "/admin/v2/tenants/fresh-tenant", "x", 400, "tenant info must be a JSON object"),
    ("PUT", "/admin/v2/tenants/fresh-tenant", {"adminRoles": "r"}, 400, "adminRoles must be"),
    ("POST", "/admin/v2/tenants/{t}", None, 400, "tenant info must be a JSON object"),
    ("POST", "/admin/v2/tenants/{t}", {"allowedClusters": [1]}, 400, "allowedClusters must be"),
    ("PUT", "/admin/v2/namespaces/{t}/fresh-ns", None, 400, "namespace policies must be"),
    ("PUT", "/admin/v2/namespaces/{t}/fresh-ns", [], 400, "namespace policies must be"),
    (
        "PUT",
        "/admin/v2/namespaces/{t}/fresh-ns",
        {"message_ttl_in_seconds": INT + 1},
        400,
        f"messageTTL must be an integer >= 0 and <= {INT}",
    ),
    ("POST", NS + "/retention", None, 400, "retention must be"),
    (
        "POST",
        NS + "/retention",
        {"retentionTimeInMinutes": INT + 1},
        400,
        f"retentionTimeInMinutes must be an integer >= -1 and <= {INT}",
    ),
    (
        "POST",
        NS + "/retention",
        {"retentionSizeInMB": LONG + 1},
        400,
        f"retentionSizeInMB must be an integer >= -1 and <= {LONG}",
    ),
    ("POST", NS + "/messageTTL", INT + 1, 400, f"messageTTL must be an integer >= 0 and <= {INT}"),
    ("POST", NS + "/messageTTL", 1.5, 400, "messageTTL must be an integer"),
    ("POST", NS + "/messageTTL", None, 400, "messageTTL must be an integer"),
    ("POST", NS + "/deduplication", None, 400, "deduplication must be true or false"),
    ("PUT", NS + "/schemaCompatibilityStrategy", ["FULL"], 400, "unknown schema compat"),
    ("PUT", NS + "/offloadThreshold", LONG + 1, 400, "offloadThreshold must be an integer >= -1"),
    ("PUT", NS + "/offloadThresholdInSeconds", -2, 400, "offloadThresholdInSeconds must be"),
    ("PUT", NS + "/offloadDeletionLagMs", LONG + 1, 400, f"<= {LONG}"),
    ("POST", NS + "/backlogQuota", None, 400, "backlog quota must be a JSON object"),
    ("POST", NS + "/backlogQuota", {"limitSize": LONG + 1}, 400, "limitSize must be"),
    ("POST", NS + "/backlogQuota", {"limitTime": INT + 1}, 400, "limitTime must be"),
    ("POST", NS + "/backlogQuota", {"policy": ["x"]}, 400, "unknown backlog quota policy"),
    ("POST", NS + "/persistence", {"bookkeeperEnsemble": 2**40}, 400, "<= 64"),
    ("POST", NS + "/persistence", [], 400, "persistence must be"),
    ("PUT", "/admin/v2/persistent/{ns}/fresh/partitions", None, 400, "partitions must be"),
    ("PUT", "/admin/v2/persistent/{ns}/fresh/partitions", {}, 400, "partitions must be"),
    ("POST", P + "/partitions", "3", 400, "partitions must be an integer"),
    ("POST", X + "/deduplicationEnabled", None, 400, "deduplication must be true or false"),
    ("POST", X + "/retention", {"retentionSizeInMB": -2}, 400, "retentionSizeInMB must be"),
    ("POST", X + "/retention", 5, 400, "retention must be"),
    ("POST", X + "/maxMessageSize", 0, 400, "maxMessageSize must be"),
    ("POST", X + "/maxMessageSize", 10**9, 400, "broker's max_message_size"),
    ("PUT", X + "/subscription/fresh-sub", [], 400, "position must be"),
    ("PUT", X + "/subscription/fresh-sub", 0, 400, "position must be"),
    (
        "PUT",
        X + "/subscription/fresh-sub",
        {"ledgerId": LONG + 1, "entryId": 0},
        400,
        f"<= {LONG}",
    ),
    ("PUT", X + "/offload", [1], 400, "position must be"),
    ("POST", "/admin/v2/schemas/{ns}/x/schema", None, 400, "a schema is a JSON object"),
    ("POST", "/admin/v2/schemas/{ns}/x/schema", {"type": "AVRO", "schema": 5}, 400, '"schema"'),
    (
        "POST",
        "/admin/v2/schemas/{ns}/x/schema",
        {"type": "INT32", "properties": [1]},
        400,
        '"properties" must be a JSON object',
    ),
    ("POST", "/magnetar/v1/topics/{ns}/x/subscription/s/commit", None, 400, "a commit"),
    ("POST", "/magnetar/v1/topics/{ns}/x/subscription/s/commit", {"offsets": []}, 400, "offsets"),
    (
        "POST",
        "/magnetar/v1/topics/{ns}/x/subscription/s/commit",
        {"offsets": {"0": "x"}},
        400,
        "bad commit for partition",
    ),
    ("PUT", "/views/fresh_view", None, 400, "a view definition is a JSON object"),
    ("PUT", "/views/fresh_view", [], 400, "a view definition is a JSON object"),
    ("POST", "/views/fresh_view/as-of", None, 400, "an as-of point"),
    ("POST", "/views/fresh_view/as-of", {"timestamp": 1, "label": 5}, 400, '"label" must be'),
    ("POST", "/magnetar/v1/kafka/offsets", None, 400, "an offsets request must be"),
    ("POST", "/magnetar/v1/kafka/offsets", {"op": "drop"}, 400, "unknown op 'drop'"),
    ("POST", "/magnetar/v1/kafka/offsets", {"op": "fetch"}, 400, "group must be text"),
    ("POST", "/magnetar/v1/kafka/txn-markers", [], 400, "a transaction marker request"),
    ("POST", "/magnetar/v1/kafka/txn-markers", {"topic": "t", "partition": -1}, 400, "partition"),
]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory)


@pytest.fixture(scope="module")
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


@pytest.fixture(scope="module")
def world(admin: AdminHttp) -> str:
    """A tenant/namespace holding topic ``x`` (subscription ``s``) and partitioned ``p``."""
    ns = f"{unique('bodies')}/b"
    admin.ok("PUT", f"/admin/v2/tenants/{ns.split('/')[0]}", {})
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/x")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/x/subscription/s?messageId=earliest")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/p/partitions", 2)
    return ns


def _url(path: str, world: str) -> str:
    return path.format(ns=world, t=world.split("/")[0])


@pytest.mark.parametrize(
    ("kind", "raw", "status", "fragment"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
@pytest.mark.parametrize(("method", "path"), ENDPOINTS, ids=[f"{m} {p}" for m, p in ENDPOINTS])
def test_malformed_bodies_are_refused_by_every_endpoint(
    admin: AdminHttp,
    world: str,
    method: str,
    path: str,
    kind: str,
    raw: bytes,
    status: int,
    fragment: str,
) -> None:
    reply = admin.refused(method, _url(path, world), raw=raw)
    assert reply.status == status, reply
    assert fragment in reply.reason


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    WRONG,
    ids=[f"{m} {p} {b!r:.30}" for m, p, b, _, _ in WRONG],
)
def test_bodies_of_the_wrong_type_or_range_are_refused_and_change_nothing(
    admin: AdminHttp, world: str, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    before = store_snapshot(admin, world, "x")
    reply = admin.refused(method, _url(path, world), body)
    assert reply.status == status, reply
    assert fragment in reply.reason
    assert store_snapshot(admin, world, "x") == before


def test_every_endpoint_with_a_body_is_in_the_table(admin: AdminHttp, world: str) -> None:
    """The route table's calls that declare a body (OpenAPI requestBody) are all driven."""
    spec = admin.get("/openapi.json")["paths"]
    driven = [(m, _url(p, world).split("?")[0]) for m, p in ENDPOINTS]
    for template, ops in spec.items():
        pattern = re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)) + "$")
        for method, op in ops.items():
            if "requestBody" in op:
                hits = [p for m, p in driven if m == method.upper() and pattern.match(p)]
                assert hits, f"{method.upper()} {template} takes a body: add it to ENDPOINTS"


def test_the_server_still_serves_and_logged_no_traceback(
    standalone: StandaloneProcess, admin: AdminHttp, world: str
) -> None:
    admin.ok("POST", _url(NS + "/messageTTL", world), 60)
    assert admin.get(_url(NS + "/messageTTL", world)) == 60
    admin.ok("PUT", f"/admin/v2/tenants/{unique('after')}", {"allowedClusters": ["standalone"]})
    assert not [line for line in standalone.output if "Traceback" in line]
