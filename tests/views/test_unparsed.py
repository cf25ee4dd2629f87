"""Messages that do not parse as the topic's JSON schema (issue 18 item 8), on a real
standalone with Spark: counted in the view's status and metrics by default, the view FAILED
at the first one with ``"onUnparsed": "fail"``, and the count exactly once across a restart.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pulsar.schema import JsonSchema

from magnetar.cli.rest import AdminCallError, RestClient
from magnetar.testing.server import REPO, StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "mixed"
FULL = f"persistent://public/default/{TOPIC}"
BY_USER = "SELECT data.user AS user_id, count(*) AS n FROM events GROUP BY data.user"
# offset → what is published there: a Txn through the JSON schema, or raw bytes
NOT_JSON, NOT_AN_OBJECT = b"this is not json", b"[1, 2]"
LAYOUT: list[tuple[str, int] | bytes] = [
    ("u1", 1),
    ("u2", 2),
    ("u1", 3),
    NOT_JSON,  # offset 3: the first unparsed message
    ("u2", 4),
    NOT_AN_OBJECT,  # offset 5: JSON, but not the record the schema describes
    ("u1", 5),
]


@dataclass
class Mixed:
    server: StandaloneProcess
    rest: RestClient


def _publish(client: pulsar.Client, items: list[tuple[str, int] | bytes]) -> None:
    """Each item in order: records through the JSON schema, raw bytes through a producer
    without a schema (as a misbehaving client would)."""
    typed = client.create_producer(TOPIC, schema=JsonSchema(h.Txn), batching_enabled=False)
    raw = client.create_producer(TOPIC, batching_enabled=False)
    try:
        for item in items:
            if isinstance(item, bytes):
                raw.send(item)
            else:
                typed.send(h.Txn(user=item[0], amount=item[1]))
    finally:
        typed.close()
        raw.close()


def _start(data: Path) -> tuple[StandaloneProcess, RestClient]:
    args = ["--spark-master", "local[2]", "--views-python-path", str(REPO)]
    server = StandaloneProcess(data, extra_args=args)
    server.startup_timeout = 120
    server.start()
    return server, RestClient(server.http_url, timeout=300)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    server, rest = _start(tmp_path_factory.mktemp("mixed"))
    try:
        client = pulsar.Client(server.pulsar_url)
        _publish(client, LAYOUT)
        client.close()
        rest.call("PUT", "/views/counted", {"source": TOPIC, "sql": BY_USER, "key": "user_id"})
        strict = {"source": TOPIC, "sql": BY_USER, "key": "user_id", "onUnparsed": "fail"}
        rest.call("PUT", "/views/strict", strict)
        folded = {"source": TOPIC, "python": "tests.views.transforms:count", "key": "partition"}
        rest.call("PUT", "/views/folded", folded)
        for name in ("counted", "folded"):
            h.wait_for(lambda n=name: h.reached(rest, n, TOPIC, len(LAYOUT)), 240, f"{name} done")
        yield Mixed(server, rest)
    finally:
        server.stop()


def _metric(http_url: str, name: str, view: str, **labels: str) -> float:
    """The value of the sample ``name`` of ``view`` (and ``labels``) in ``/metrics``,
    parsed with prometheus_client's parser."""
    with urllib.request.urlopen(http_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            wanted = {"view": view, **labels}
            if sample.name == name and wanted.items() <= sample.labels.items():
                return float(sample.value)
    raise AssertionError(f"no {name} for view {view} in /metrics")


@pytest.mark.parametrize("name", ["counted", "folded"])
def test_unparsed_messages_are_counted_with_the_first_offset(mixed: Mixed, name: str) -> None:
    status = h.view(mixed.rest, name)
    assert status["state"] == "LIVE"
    assert status["unparsed"] == 2
    assert status["firstUnparsed"] == {"topic": FULL, "partition": 0, "offset": 3}
    metric = "magnetar_view_unparsed_messages_total"
    assert _metric(mixed.server.http_url, metric, name) == 2.0


def test_the_parsed_messages_are_still_applied(mixed: Mixed) -> None:
    rows = h.rows_by(mixed.rest, "counted", "user_id")
    assert rows["u1"]["n"] == 3 and rows["u2"]["n"] == 2


def test_fail_mode_fails_at_the_first_unparsed_offset(mixed: Mixed) -> None:
    status = h.wait_for(
        lambda: (s := h.view(mixed.rest, "strict"))["state"] == "FAILED" and s, 240, "FAILED"
    )
    assert status["failedAt"] == {"topic": FULL, "partition": 0, "offset": 3}
    assert "offset 3" in status["error"] and '"onUnparsed": "count"' in status["error"]
    # nothing of the failing batch was committed: the view never went past the bad message
    assert status["offsets"].get(FULL, {}).get("0", 0) <= 3
    assert status["definition"]["onUnparsed"] == "fail"
    # its series (issue 19): FAILED, nothing of the history applied, every message behind
    url = mixed.server.http_url
    assert _metric(url, "magnetar_view_state", "strict", state="FAILED") == 1
    assert _metric(url, "magnetar_view_state", "strict", state="LIVE") == 0
    assert _metric(url, "magnetar_view_bootstrap_progress", "strict") == 0
    assert _metric(url, "magnetar_view_lag_events", "strict") == len(LAYOUT)


def test_a_bad_setting_is_refused(mixed: Mixed) -> None:
    body = {"source": TOPIC, "sql": BY_USER, "key": "user_id", "onUnparsed": "skip"}
    with pytest.raises(AdminCallError, match="onUnparsed"):
        mixed.rest.call("PUT", "/views/badsetting", body)


def test_the_count_survives_a_restart_exactly_once(mixed: Mixed) -> None:
    """After a restart the view resumes from its checkpoint (batches Spark replays are
    skipped by the store): the count is what it was, plus what is published afterwards."""
    server = mixed.server
    server.stop()
    server.start()
    rest = RestClient(server.http_url, timeout=300)
    client = pulsar.Client(server.pulsar_url)
    _publish(client, [NOT_JSON, ("u2", 6)])
    client.close()
    end = len(LAYOUT) + 2
    for name in ("counted", "folded"):
        try:
            status = h.wait_for(lambda n=name: h.reached(rest, n, TOPIC, end), 240, f"{name} done")
        except AssertionError as e:  # say why: the view's status and the server's last words
            log = h.last_words(server.output)
            raise AssertionError(f"{e}\nstatus: {h.view(rest, name)}\nserver:\n{log}") from None
        assert status["unparsed"] == 3, name
        assert status["firstUnparsed"]["offset"] == 3
    mixed.rest = rest


def test_unparsed_counts_are_kept_per_batch_and_folded(tmp_path: Any) -> None:
    """The per-batch files: a batch counts only once the store holds it, a replay rewrites
    the same count, and committed batches fold into one base file."""
    from magnetar.views.unparsed import Unparsed, UnparsedLog

    log = UnparsedLog(tmp_path / "unparsed")
    first = {"topic": FULL, "partition": 0, "offset": 3}
    log.record(0, Unparsed(2, first), committed=-1)
    assert log.total(-1) == Unparsed()  # batch 0 not committed yet
    log.record(0, Unparsed(2, first), committed=-1)  # Spark replays it
    assert log.total(0) == Unparsed(2, first)
    log.record(1, Unparsed(1, {**first, "offset": 9}), committed=0)  # folds batch 0
    assert sorted(p.name for p in (tmp_path / "unparsed").iterdir()) == ["1.json", "base.json"]
    assert UnparsedLog(tmp_path / "unparsed").total(1) == Unparsed(3, first)
    assert UnparsedLog(tmp_path / "unparsed").total(0) == Unparsed(2, first)
