"""A view that cannot resume after a restart (its Redis store is down) shows FAILED with the
reason and what to do; the other views resume; once the store is back, a PUT of the same
definition resumes it from its last commit, and the counts are exact."""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from magnetar.cli.rest import RestClient
from magnetar.testing.datastores import RedisServer, ensure_installed
from magnetar.testing.server import StandaloneProcess
from tests.views import helpers as h

pytestmark = pytest.mark.slow
TOPIC = "resumes"
ARGS = ["--spark-master", "local[2]"]
SQL = "SELECT data.user AS user, count(*) AS n FROM events GROUP BY data.user"


def _start(data: Path) -> tuple[StandaloneProcess, RestClient]:
    server = StandaloneProcess(data, extra_args=ARGS)
    server.startup_timeout = 120
    server.start()
    return server, RestClient(server.http_url, timeout=300)


def test_a_view_whose_store_is_down_at_restart_fails_clearly_then_resumes(
    tmp_path: Path,
) -> None:
    ensure_installed()
    (tmp_path / "redis").mkdir()
    redis = RedisServer(root=tmp_path / "redis").start()
    server, rest = _start(tmp_path / "node")
    try:
        client = pulsar.Client(server.pulsar_url)
        first = h.events(60, seed=3)
        h.publish(client, TOPIC, first)
        client.close()
        rest.call(
            "PUT",
            "/views/inredis",
            {"source": TOPIC, "sql": SQL, "key": "user"} | {"store": redis.url},
        )
        rest.call("PUT", "/views/local", {"source": TOPIC, "sql": SQL, "key": "user"})
        for name in ("inredis", "local"):
            h.wait_for(lambda n=name: h.reached(rest, n, TOPIC, 60), 180, f"{name} at 60")
        server.kill()
        assert redis.proc is not None
        redis.proc.terminate()
        redis.proc.wait(30)

        server, rest = _start(tmp_path / "node")
        status = h.wait_for(
            lambda: (s := h.view(rest, "inredis"))["state"] == "FAILED" and s, 180, "FAILED"
        )
        assert "could not resume" in status["error"] and "PUT" in status["error"]
        assert h.wait_for(lambda: h.reached(rest, "local", TOPIC, 60), 180, "local resumed")

        redis = RedisServer(port=redis.port, root=tmp_path / "redis").start()
        again = {"source": TOPIC, "sql": SQL, "key": "user", "store": redis.url}
        rest.call("PUT", "/views/inredis", again)
        client = pulsar.Client(server.pulsar_url)
        more = h.events(20, seed=4)
        h.publish(client, TOPIC, more)
        client.close()
        try:
            h.wait_for(lambda: h.reached(rest, "inredis", TOPIC, 80), 180, "inredis at 80")
        except AssertionError as e:  # say why (seen once in a full run): status, last words
            log, status = h.last_words(server.output), h.view(rest, "inredis")
            raise AssertionError(f"{e}\nstatus: {status}\nserver:\n{log}") from None
        assert h.view(rest, "inredis")["state"] == "LIVE"
        got = {u: r["n"] for u, r in h.rows_by(rest, "inredis", "user").items()}
        assert got == {u: r["n"] for u, r in h.counts(first + more).items()}
    finally:
        server.stop()
        redis.stop()
