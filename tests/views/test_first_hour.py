"""What a new user meets first with views, on a real standalone with Spark (issue 18):
a filter on a column that is not the key is refused with the view's columns instead of
answering other keys' rows, over REST and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.cli.rest import AdminCallError, RestClient
from magnetar.testing.server import REPO, StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "shop"
BY_USER = (
    "SELECT data.user AS user_id, count(*) AS n, sum(data.amount) AS total "
    "FROM events GROUP BY data.user"
)
BY_AMOUNT = "SELECT data.amount AS amount, count(*) AS n FROM events GROUP BY data.amount"


@dataclass
class Shop:
    server: StandaloneProcess
    rest: RestClient
    events: list[tuple[str, int]]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    args = ["--spark-master", "local[2]"]
    server = StandaloneProcess(tmp_path_factory.mktemp("shop"), extra_args=args)
    server.startup_timeout = 120
    server.start()
    try:
        rest = RestClient(server.http_url, timeout=300)
        client = pulsar.Client(server.pulsar_url)
        events = h.events(200, seed=18)
        h.publish(client, TOPIC, events)
        client.close()
        rest.call("PUT", "/views/byuser", {"source": TOPIC, "sql": BY_USER, "key": "user_id"})
        rest.call("PUT", "/views/byamount", {"source": TOPIC, "sql": BY_AMOUNT, "key": "amount"})
        for name in ("byuser", "byamount"):
            h.wait_for(lambda n=name: h.reached(rest, n, TOPIC, 200), 240, f"{name} at 200")
        yield Shop(server, rest, events)
    finally:
        server.stop()


def _refused(rest: RestClient, path: str) -> str:
    with pytest.raises(AdminCallError, match="HTTP 400") as refused:
        rest.call("GET", path)
    return str(refused.value)


def test_a_filter_on_a_column_that_is_not_the_key_is_refused(shop: Shop) -> None:
    reason = _refused(shop.rest, "/views/byuser/rows?user=u1")
    assert "unknown column(s) ['user']" in reason
    assert "user_id string" in reason and "n bigint" in reason and "total bigint" in reason
    reason = _refused(shop.rest, "/views/byuser/rows?n=3")
    assert "not key columns" in reason and "['user_id']" in reason
    expected = h.counts(shop.events)["u1"]
    rows = shop.rest.call("GET", "/views/byuser/rows?user_id=u1")["rows"]
    assert rows == [{"user_id": "u1", "n": expected["n"], "total": expected["total"]}]


def test_a_filter_value_of_the_wrong_type_is_refused(shop: Shop) -> None:
    reason = _refused(shop.rest, "/views/byamount/rows?amount=u1")
    assert "amount='u1'" in reason and "int" in reason
    amount = shop.events[0][1]
    rows = shop.rest.call("GET", f"/views/byamount/rows?amount={amount}")["rows"]
    assert rows == [{"amount": amount, "n": sum(1 for _, a in shop.events if a == amount)}]


def test_the_cli_fails_with_the_reason(shop: Shop) -> None:
    args = ["views", "--url", shop.server.http_url, "rows", "byuser", "--where", "user=u1"]
    run = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 1, run
    assert run.stdout == "" and "Traceback" not in run.stderr
    assert "unknown column(s) ['user']" in run.stderr and "user_id" in run.stderr


def test_view_metrics_report_live_caught_up_views(shop: Shop) -> None:
    """``/metrics`` parsed with prometheus_client: each LIVE view is in the state LIVE (and
    no other), its bootstrap done, no events and no seconds behind (issue 19)."""
    with urllib.request.urlopen(shop.server.http_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    samples = {
        (s.name, s.labels.get("view"), s.labels.get("state")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("magnetar_view_")
    }
    for name in ("byuser", "byamount"):
        states = {st: v for (n, view, st), v in samples.items() if view == name and st}
        assert states["LIVE"] == 1 and sum(states.values()) == 1, states
        assert "BOOTSTRAPPING" in states and "FAILED" in states  # the whole state set
        assert samples[("magnetar_view_bootstrap_progress", name, None)] == 1.0
        assert samples[("magnetar_view_lag_events", name, None)] == 0
        assert samples[("magnetar_view_lag_seconds", name, None)] == 0
        assert samples[("magnetar_view_unparsed_messages_total", name, None)] == 0
