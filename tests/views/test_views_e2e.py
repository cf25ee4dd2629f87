"""Views end to end on a real ``magnetar standalone``: history in many segments, part of it
offloaded to the object store, then a live tail; every store backend; as-of; bad input; a
failing view next to healthy ones; a new version swapping in; the CLI."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.cli import main
from magnetar.cli.rest import AdminCallError, RestClient
from magnetar.testing.server import REPO, StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "ledger"
SQL = (
    "SELECT data.user AS user, count(*) AS n, sum(data.amount) AS total "
    "FROM events GROUP BY data.user"
)
UNLUCKY = 150  # the offset where explode_on_13 raises


@dataclass
class World:
    server: StandaloneProcess
    rest: RestClient
    history: list[tuple[str, int]]
    live: list[tuple[str, int]]
    ts: list[int]  # as-of points: after the 1st and the 2nd history part
    stores: dict[str, str]

    @property
    def all(self) -> list[tuple[str, int]]:
        return self.history + self.live


def _segments(rest: RestClient) -> list[dict[str, Any]]:
    plan = rest.call("GET", f"/magnetar/v1/topics/public/default/{TOPIC}/plan")
    segments: list[dict[str, Any]] = plan["partitions"][0]["segments"]
    return segments


def _offload(rest: RestClient) -> None:
    """Offload every closed segment and wait until their local copies are gone."""
    rest.call("PUT", f"/admin/v2/persistent/public/default/{TOPIC}/offload")

    def offloaded() -> bool:
        remote = [s for s in _segments(rest) if s["object"] and not s["local"]]
        return len(remote) >= 5

    h.wait_for(offloaded, 60, "five segments offloaded with their local copies gone")


def _define(rest: RestClient, stores: dict[str, str]) -> None:
    rest.call("PUT", "/views/counts", {"source": TOPIC, "sql": SQL, "key": ["user"]})
    for kind, url in stores.items():
        body = {"source": TOPIC, "python": "tests.views.transforms:balance", "key": "user"}
        rest.call("PUT", f"/views/bal_{kind}", {**body, "store": url})
    failing = {"source": TOPIC, "python": "tests.views.transforms:explode_on_13", "key": "user"}
    rest.call("PUT", "/views/failing", failing)


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, postgresql_url: str, redis_url: str
) -> Iterator[World]:
    args = ["--segment-max-entries", "25", "--offload-deletion-lag-ms", "0"]
    args += ["--offload-check-interval", "0.2", "--spark-master", "local[2]"]
    args += ["--views-max-batch-events", "1000", "--views-python-path", str(REPO)]
    server = StandaloneProcess(tmp_path_factory.mktemp("views"), extra_args=args)
    server.startup_timeout = 120
    server.start()
    client = pulsar.Client(server.pulsar_url)
    try:
        rest = RestClient(server.http_url, timeout=300)
        history = h.events(400, seed=1, unlucky_at=UNLUCKY)
        h.publish(client, TOPIC, history[:200], chunk=25)
        ts = [h.now_after_tick()]
        _offload(rest)
        h.publish(client, TOPIC, history[200:], chunk=25)
        ts.append(h.now_after_tick())
        local = [s for s in _segments(rest) if s["local"] and s["state"] != "OPEN"]
        assert len(local) >= 5, "the later history stays in local segments"
        stores = {"sqlite": "sqlite", "postgresql": postgresql_url, "redis": redis_url}
        _define(rest, stores)
        live = h.events(200, seed=2)
        h.publish(client, TOPIC, live)
        yield World(server, rest, history, live, ts, stores)
    finally:
        client.close()
        server.stop()


def caught_up(world: World, name: str, end: int = 600) -> dict[str, Any]:
    """Wait until ``name`` has applied everything up to ``end``; on timeout say where it is."""
    try:
        return h.wait_for(lambda: h.reached(world.rest, name, TOPIC, end), 180, f"{name} at {end}")
    except AssertionError as e:
        tail = "".join(world.server.output[-60:])
        raise AssertionError(f"{e}; status {h.view(world.rest, name)}; server:\n{tail}") from None


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "redis"])
def test_order_sensitive_python_view_equals_the_reference(world: World, kind: str) -> None:
    status = caught_up(world, f"bal_{kind}")
    assert status["state"] == "LIVE" and status["progress"] == 1.0
    assert status["lag"] == {"messages": 0, "ms": 0}
    expected = h.balances(world.all)
    assert any(s["refused"] for s in expected.values()), "the data must exercise overdrafts"
    assert h.rows_by(world.rest, f"bal_{kind}", "user") == expected


def test_sql_view_equals_the_reference_and_serves_by_key(world: World) -> None:
    status = caught_up(world, "counts")
    assert status["sourceColumns"] == ["data"], "the query reads only the column it uses"
    assert h.rows_by(world.rest, "counts", "user") == h.counts(world.all)
    one = world.rest.call("GET", "/views/counts/rows?user=u3")["rows"]
    assert one == [h.counts(world.all)["u3"]]
    assert world.rest.call("GET", "/views/counts/rows?user=nobody")["rows"] == []
    assert len(world.rest.call("GET", "/views/counts/rows?limit=2")["rows"]) == 2


def test_a_failing_view_stops_at_the_event_and_others_go_on(world: World) -> None:
    status = h.wait_for(
        lambda: (s := h.view(world.rest, "failing"))["state"] == "FAILED" and s, 180, "FAILED"
    )
    assert status["failedAt"]["offset"] == UNLUCKY
    assert "unlucky amount 13" in status["error"] and f"offset {UNLUCKY}" in status["error"]
    assert status["offsets"]["persistent://public/default/ledger"]["0"] <= UNLUCKY
    for kind in world.stores:  # the healthy views went on through the live tail
        caught_up(world, f"bal_{kind}")


@pytest.mark.parametrize("name", ["counts", "bal_sqlite"])
def test_as_of_equals_the_reference_over_the_prefix(world: World, name: str) -> None:
    h.wait_for(lambda: h.reached(world.rest, name, TOPIC, 600), 180, "caught up")
    reference = h.counts if name == "counts" else h.balances
    for ts, prefix in zip(world.ts, (200, 400), strict=True):
        made = world.rest.call("POST", f"/views/{name}/as-of", {"timestamp": ts})
        assert made["name"] == f"{name}@t{ts}" and made["state"] == "VIRTUAL"
        assert h.rows_by(world.rest, made["name"], "user") == reference(world.history[:prefix])
    offsets = {TOPIC: {"0": 100}}
    made = world.rest.call(
        "POST", f"/views/{name}/as-of", {"offsets": offsets, "label": "first100"}
    )
    assert h.rows_by(world.rest, f"{name}@first100", "user") == reference(world.history[:100])
    with pytest.raises(AdminCallError, match="400"):
        world.rest.call(
            "PUT", f"/views/{name}@first100", {"source": TOPIC, "sql": SQL, "key": "user"}
        )


def test_as_of_as_a_dataframe(world: World, spark: Any) -> None:
    from magnetar.views import as_of

    frame = as_of(spark, "counts", timestamp=world.ts[0], url=world.server.http_url)
    got = {r["user"]: r.asDict() for r in frame.collect()}
    assert got == h.counts(world.history[:200])
    frame = as_of(spark, "bal_sqlite", offsets={TOPIC: {"0": 300}}, url=world.server.http_url)
    assert {r["user"]: r.asDict() for r in frame.collect()} == h.balances(world.history[:300])


BAD: list[tuple[dict[str, Any], str]] = [
    ({"source": TOPIC, "sql": "SELEC user FROM events", "key": "user"}, "invalid SQL"),
    ({"source": TOPIC, "sql": "SELECT nope FROM events", "key": "nope"}, "invalid SQL"),
    ({"source": TOPIC, "sql": "SELECT data.user AS u FROM events", "key": "user"}, "key column"),
    ({"source": "no-such-topic", "sql": SQL, "key": "user"}, "does not exist"),
    ({"source": TOPIC, "python": "tests.views.nowhere:f", "key": "user"}, "cannot import"),
    ({"source": TOPIC, "python": "tests.views.transforms:NOT_CALLABLE", "key": "user"}, "callable"),
    ({"source": TOPIC, "python": "tests.views.transforms:count", "key": "zzz"}, "key column"),
    ({"source": TOPIC, "key": "user"}, "exactly one transformation"),
    ({"source": TOPIC, "sql": SQL, "key": "user", "store": "mongodb://x"}, "unknown state store"),
    ({"source": TOPIC, "sql": SQL, "key": []}, "key"),
]


@pytest.mark.parametrize(("body", "reason"), BAD)
def test_bad_definitions_are_refused_clearly(
    world: World, body: dict[str, Any], reason: str
) -> None:
    with pytest.raises(AdminCallError, match="HTTP 400") as refused:
        world.rest.call("PUT", "/views/bad", body)
    assert reason in str(refused.value)
    with pytest.raises(AdminCallError, match="HTTP 404"):
        world.rest.call("GET", "/views/bad")


def test_bad_names_and_calls(world: World) -> None:
    with pytest.raises(AdminCallError, match="bad view name"):
        world.rest.call("PUT", "/views/9lives", {"source": TOPIC, "sql": SQL, "key": "user"})
    with pytest.raises(AdminCallError, match="HTTP 404"):
        world.rest.call("GET", "/views/missing/rows")
    with pytest.raises(AdminCallError, match="exactly one"):
        world.rest.call("POST", "/views/counts/as-of", {})


def test_a_new_definition_backfills_then_swaps_in(world: World) -> None:
    caught_up(world, "counts")
    sql = SQL.replace("count(*) AS n", "count(*) AS n, max(data.amount) AS top")
    status = world.rest.call("PUT", "/views/counts", {"source": TOPIC, "sql": sql, "key": "user"})
    assert status["version"] == 1, "the old version serves while the new one backfills"
    swapped = h.wait_for(
        lambda: (s := h.view(world.rest, "counts"))["version"] == 2 and s, 180, "v2"
    )
    assert swapped["state"] == "LIVE" and "pending" not in swapped
    expected = h.counts(world.all)
    for user, row in expected.items():
        row["top"] = max(a for u, a in world.all if u == user)
    assert h.rows_by(world.rest, "counts", "user") == expected


def test_cli(world: World) -> None:
    def run(*args: str) -> Any:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["views", "--url", world.server.http_url, *args]) == 0
        return json.loads(out.getvalue())

    assert "counts" in [v["name"] for v in run("list")]
    assert run("get", "bal_sqlite")["definition"]["python"] == "tests.views.transforms:balance"
    rows = run("rows", "bal_sqlite", "--where", "user=u1")
    assert rows == [h.balances(world.all)["u1"]]
    made = run("as-of", "bal_sqlite", "--offsets", json.dumps({TOPIC: {"0": 50}}), "--label", "cli")
    assert made["name"] == "bal_sqlite@cli"
    assert main(["views", "--url", world.server.http_url, "get", "nothing"]) == 1


def test_delete_removes_the_view_and_its_state(world: World) -> None:
    world.rest.call("PUT", "/views/doomed", {"source": TOPIC, "sql": SQL, "key": "user"})
    world.rest.call("POST", "/views/doomed/as-of", {"offsets": {TOPIC: {"0": 10}}, "label": "x"})
    world.rest.call("DELETE", "/views/doomed")
    for name in ("doomed", "doomed@x"):
        with pytest.raises(AdminCallError, match="HTTP 404"):
            world.rest.call("GET", f"/views/{name}")
    assert not (Path(world.server.data_dir) / "views" / "doomed").exists()
    assert "counts" in [v["name"] for v in world.rest.call("GET", "/views")]
