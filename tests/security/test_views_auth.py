"""Views on a node with authentication and authorization on: the view's query reads its
source through the node's own HTTP port with the node's client credential
(``--broker-client-auth-token``, Pulsar's brokerClientAuthenticationParameters), so a view
builds and stays live; the views API itself still needs a super-user."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pulsar
import pytest
import requests

from magnetar.core.tokens import create_token, secret_key
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import unique

pytestmark = pytest.mark.slow  # Spark starts in the server


def test_a_view_builds_on_a_node_with_authentication_on(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(secret_key())
    tokens = {r: create_token(r, key.read_bytes()) for r in ("admin", "broker", "bob")}
    (tmp_path / "broker.token").write_text(tokens["broker"])
    server = StandaloneProcess(
        tmp_path / "data",
        extra_args=[
            "--authentication-enabled", "true", "--token-secret-key", f"file://{key}",
            "--authorization-enabled", "true", "--superuser-roles", "admin,broker",
            "--broker-client-auth-token", f"file://{tmp_path / 'broker.token'}",
            "--spark-master", "local[1]",
        ],
    )  # fmt: skip
    server.startup_timeout = 120
    server.start()
    try:
        topic = unique("auth-view")
        client = pulsar.Client(
            server.pulsar_url, authentication=pulsar.AuthenticationToken(tokens["admin"])
        )
        producer = client.create_producer(topic)
        for i in range(30):
            producer.send(json.dumps({"i": i}).encode(), partition_key=f"k{i % 3}")
        client.close()
        view = f"{server.http_url}/views/{topic.replace('-', '_')}"
        body = {"source": topic, "sql": "SELECT key, count(*) AS n FROM events GROUP BY key"}
        body["key"] = "key"  # type: ignore[assignment]
        refused = requests.put(view, json=body, timeout=60, headers=_bearer(tokens["bob"]))
        assert refused.status_code == 403, refused.text
        made = requests.put(view, json=body, timeout=300, headers=_bearer(tokens["admin"]))
        assert made.status_code == 201, made.text
        deadline = time.monotonic() + 180
        status: dict[str, object] = {}
        while time.monotonic() < deadline:
            status = requests.get(view, timeout=30, headers=_bearer(tokens["admin"])).json()
            if status.get("state") in ("LIVE", "FAILED"):
                break
            time.sleep(0.5)
        assert status.get("state") == "LIVE", status
        rows = requests.get(f"{view}/rows", timeout=30, headers=_bearer(tokens["admin"])).json()
        assert {r["key"]: r["n"] for r in rows["rows"]} == {"k0": 10, "k1": 10, "k2": 10}
    finally:
        server.stop()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
