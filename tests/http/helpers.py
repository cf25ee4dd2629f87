"""A plain urllib JSON client for the admin REST API, and polling with a deadline.

The tests talk to a real ``magnetar standalone`` the way any HTTP client would: no aiohttp,
no Magnetar code on the client side.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

T = TypeVar("T")
NO_BODY = object()  # send no body at all (as opposed to the JSON value null)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any

    @property
    def reason(self) -> str:
        """The refusal's ``reason``; fails the test if the body is not {"reason": str}."""
        assert isinstance(self.body, dict), f"refusal body is not a JSON object: {self.body!r}"
        reason = self.body.get("reason")
        assert isinstance(reason, str) and reason, f"refusal without a reason: {self.body!r}"
        return reason


class AdminHttp:
    """``call`` returns any status; ``get``/``ok`` fail the test unless the call succeeds."""

    def __init__(
        self,
        url: str,
        *,
        context: ssl.SSLContext | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.context = context  # for https:// URLs
        self.headers = dict(headers or {})  # sent with every call (Authorization ...)

    def call(
        self, method: str, path: str, body: Any = NO_BODY, *, raw: bytes | None = None
    ) -> Reply:
        data = raw if raw is not None else None if body is NO_BODY else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        for key, value in self.headers.items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                return Reply(response.status, _decode(response.read()))
        except urllib.error.HTTPError as e:
            with e:
                return Reply(e.code, _decode(e.read()))

    def get(self, path: str) -> Any:
        reply = self.call("GET", path)
        assert reply.status == 200, f"GET {path}: {reply}"
        return reply.body

    def ok(self, method: str, path: str, body: Any = NO_BODY) -> Any:
        reply = self.call(method, path, body)
        assert 200 <= reply.status < 300, f"{method} {path}: {reply}"
        return reply.body

    def refused(
        self, method: str, path: str, body: Any = NO_BODY, *, raw: bytes | None = None
    ) -> Reply:
        """The call, which must be refused with a 4xx and a JSON ``reason``."""
        reply = self.call(method, path, body, raw=raw)
        assert 400 <= reply.status < 500, f"{method} {path} was not refused: {reply}"
        assert reply.reason
        return reply


def _decode(raw: bytes) -> Any:
    return json.loads(raw) if raw else None


def wait_until(probe: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    """Poll ``probe`` until it returns a truthy value (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)  # polling pace, not synchronisation: the probe decides


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_standalone(
    factory: pytest.TempPathFactory, *extra_args: str
) -> Iterator[StandaloneProcess]:
    """Body of a module-scoped fixture: one real standalone started with ``extra_args``."""
    server = StandaloneProcess(factory.mktemp("standalone"), extra_args=list(extra_args))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def http_client(server: StandaloneProcess) -> pulsar.Client:
    """A pulsar.Client that looks topics up over HTTP (``http://host:http_port``)."""
    return pulsar.Client(
        server.http_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def backlog(admin: AdminHttp, topic_path: str, sub: str) -> int:
    stats = admin.get(f"/admin/v2/persistent/{topic_path}/stats")
    return int(stats["subscriptions"][sub]["msgBacklog"])


def segments(admin: AdminHttp, topic_path: str) -> list[dict[str, Any]]:
    ledgers: list[dict[str, Any]] = admin.get(f"/admin/v2/persistent/{topic_path}/internal-stats")[
        "ledgers"
    ]
    return ledgers


def store_snapshot(admin: AdminHttp, ns: str, topic: str | None = None) -> dict[str, Any]:
    """What a refused call must leave unchanged: tenants, namespaces, policies, topics and,
    for ``topic`` (a local name in ``ns``), its partitions, subscriptions and cursors."""
    tenant = ns.split("/")[0]
    snap = {
        "tenants": admin.get("/admin/v2/tenants"),
        "tenant": admin.get(f"/admin/v2/tenants/{tenant}"),
        "namespaces": admin.get(f"/admin/v2/namespaces/{tenant}"),
        "policies": admin.get(f"/admin/v2/namespaces/{ns}"),
        "topics": admin.get(f"/admin/v2/persistent/{ns}"),
        "partitioned": admin.get(f"/admin/v2/persistent/{ns}/partitioned"),
    }
    if topic is not None:
        base = f"/admin/v2/persistent/{ns}/{topic}"
        internal = admin.get(f"{base}/internal-stats")
        snap["subscriptions"] = admin.get(f"{base}/subscriptions")
        snap["cursors"] = internal["cursors"]
        snap["entries"] = internal["entriesAddedCounter"]
        for name in snap["partitioned"]:
            local = name.rsplit("/", 1)[1]
            snap[f"partitions:{local}"] = admin.get(f"/admin/v2/persistent/{ns}/{local}/partitions")
    return snap
