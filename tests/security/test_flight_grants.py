"""With authorization on, the Flight endpoint serves a partition only to a ticket carrying
the read grant its plan gave (the plan itself needs consume): a bare ticket, a forged grant
and a grant for another partition are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pulsar
import pyarrow.flight as flight
import pytest

from magnetar.core.tokens import create_token, secret_key
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, unique


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StandaloneProcess, dict[str, str]]]:
    base = tmp_path_factory.mktemp("flight-grants")
    key = base / "secret.key"
    key.write_bytes(secret_key())
    server = StandaloneProcess(
        base / "data",
        extra_args=["--authentication-enabled", "true", "--token-secret-key", f"file://{key}",
                    "--authorization-enabled", "true", "--superuser-roles", "admin"],
    )  # fmt: skip
    server.start()
    try:
        yield server, {r: create_token(r, key.read_bytes()) for r in ("admin", "reader")}
    finally:
        server.stop()


def rows(url: str, ticket: dict[str, object]) -> int:
    client = flight.connect(url)
    try:
        return client.do_get(flight.Ticket(json.dumps(ticket))).read_all().num_rows
    finally:
        client.close()


def test_flight_reads_need_the_plans_grant(
    node: tuple[StandaloneProcess, dict[str, str]],
) -> None:
    server, tokens = node
    names = [unique("flight-a"), unique("flight-b")]
    client = pulsar.Client(
        server.pulsar_url, authentication=pulsar.AuthenticationToken(tokens["admin"])
    )
    try:
        for name in names:
            producer = client.create_producer(f"persistent://public/default/{name}")
            for i in range(10):
                producer.send(f"m{i}".encode())
    finally:
        client.close()
    admin = AdminHttp(server.http_url, headers={"Authorization": f"Bearer {tokens['admin']}"})
    admin.ok("POST", f"/admin/v2/persistent/public/default/{names[0]}/permissions/reader",
             ["consume"])  # fmt: skip
    reader = AdminHttp(server.http_url, headers={"Authorization": f"Bearer {tokens['reader']}"})
    plan = reader.get(f"/magnetar/v1/topics/public/default/{names[0]}/plan")
    part = plan["partitions"][0]
    ticket = {"topic": part["name"], "start": 0, "end": 10}
    assert rows(part["flight"], {**ticket, "grant": part["grant"]}) == 10
    with pytest.raises(flight.FlightUnauthorizedError, match="plan"):
        rows(part["flight"], ticket)
    role, expiry, mac = part["grant"].rsplit(":", 2)
    with pytest.raises(flight.FlightUnauthorizedError):
        rows(part["flight"], {**ticket, "grant": f"admin:{expiry}:{mac}"})
    other = {"topic": f"public/default/{names[1]}", "start": 0, "end": 10}
    with pytest.raises(flight.FlightUnauthorizedError):
        rows(part["flight"], {**other, "grant": part["grant"]})
    assert role == "reader"
