"""Issue 22, item 1, against a real ``magnetar standalone``: a view definition is untrusted
input. The SQL that used to run while being checked (``INSERT OVERWRITE DIRECTORY`` outside
the data directory; a join that read a server file into a view) is refused with a 400 naming
the construct, and nothing outside the data directory changes; a Python view loads only
from ``--views-python-path``; ordinary SQL and Python views still work."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from magnetar.cli.rest import AdminCallError, RestClient
from magnetar.testing.server import StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "attacked"
ITEMS = h.events(60, seed=22)
TRUSTED_MODULE = """
def count(state, event):
    current = dict(state or {"n": 0, "total": 0})
    current["n"] += 1
    current["total"] += int(event["data"]["amount"])
    return current
"""


@dataclass
class Server:
    process: StandaloneProcess
    rest: RestClient
    outside: Path  # a directory outside the data directory, with a file the attacks aim at


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    trusted = tmp_path_factory.mktemp("trusted-views")
    (trusted / "v22_trusted.py").write_text(TRUSTED_MODULE)
    outside = tmp_path_factory.mktemp("outside")
    (outside / "keep.txt").write_text("mine")
    args = ["--spark-master", "local[2]", "--views-python-path", str(trusted)]
    process = StandaloneProcess(tmp_path_factory.mktemp("data"), extra_args=args)
    process.startup_timeout = 120
    process.start()
    client = pulsar.Client(process.pulsar_url)
    try:
        h.publish(client, TOPIC, ITEMS)
        yield Server(process, RestClient(process.http_url, timeout=300), outside)
    finally:
        client.close()
        process.stop()


def _refused(server: Server, name: str, body: dict[str, object]) -> str:
    """PUT the view, expect a 400, check no view was created; returns the reason."""
    with pytest.raises(AdminCallError, match="HTTP 400") as refused:
        server.rest.call("PUT", f"/views/{name}", {"source": TOPIC, "key": "k", **body})
    with pytest.raises(AdminCallError, match="HTTP 404"):
        server.rest.call("GET", f"/views/{name}")
    return str(refused.value)


def test_insert_overwrite_directory_is_refused_and_writes_nothing(server: Server) -> None:
    sql = f"INSERT OVERWRITE DIRECTORY 'file://{server.outside}' USING text SELECT 'owned' AS k"
    reason = _refused(server, "owned", {"sql": sql})
    assert "INSERT OVERWRITE DIRECTORY" in reason
    assert [p.name for p in server.outside.iterdir()] == ["keep.txt"]
    assert (server.outside / "keep.txt").read_text() == "mine"


def test_a_join_with_a_server_file_is_refused(server: Server) -> None:
    secret = server.outside / "keep.txt"
    sql = f"SELECT e.key AS k, f.value AS leak FROM events e JOIN text.`file://{secret}` f ON true"
    reason = _refused(server, "leak", {"sql": sql})
    assert f"text.`file://{secret}`" in reason and "reading files" in reason
    assert "leak" not in [v["name"] for v in server.rest.call("GET", "/views")]


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("ADD JAR /tmp/evil.jar", "ADD JAR"),
        ("SELECT reflect('java.lang.System', 'getenv', 'HOME') AS k FROM events", "reflect"),
        ("SELECT key AS k FROM events; DROP TABLE events", "second statement"),
        ("SELECT key AS k FROM other_table", "other_table"),
    ],
)
def test_other_refused_constructs_over_http(server: Server, sql: str, named: str) -> None:
    assert named in _refused(server, "bad", {"sql": sql})


def test_an_aggregate_view_still_works(server: Server) -> None:
    sql = (
        "SELECT data.user AS user, count(*) AS n, sum(data.amount) AS total "
        "FROM events GROUP BY data.user"
    )
    server.rest.call("PUT", "/views/counts", {"source": TOPIC, "sql": sql, "key": "user"})
    h.wait_for(lambda: h.reached(server.rest, "counts", TOPIC, len(ITEMS)), 180, "counts")
    assert h.rows_by(server.rest, "counts", "user") == h.counts(ITEMS)


def test_python_views_load_only_from_the_configured_path(server: Server) -> None:
    # importable by the server (its PYTHONPATH holds the repository), but not under the path
    reason = _refused(server, "outsider", {"python": "tests.views.transforms:count"})
    assert "views_python_path" in reason
    assert "views_python_path" in _refused(server, "osview", {"python": "os:getcwd"})
    body = {"source": TOPIC, "python": "v22_trusted:count", "key": "user"}
    server.rest.call("PUT", "/views/trusted", body)
    h.wait_for(lambda: h.reached(server.rest, "trusted", TOPIC, len(ITEMS)), 180, "trusted")
    assert h.rows_by(server.rest, "trusted", "user") == h.counts(ITEMS)
