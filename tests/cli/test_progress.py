"""Progress in the CLI: a bar redrawn in place when stderr is a terminal (run under a real
pseudo-terminal), plain lines when it is not, and stdout (the result) the same either way."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pulsar
import pytest
from pulsar.schema import JsonSchema

from magnetar.cli.progress import ProgressBar
from magnetar.testing.server import REPO, StandaloneProcess
from tests.http.helpers import run_standalone, unique
from tests.views import helpers as h

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def run_on_terminal(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """``magnetar ARGS`` with stderr on a pseudo-terminal; (exit code, stdout, terminal)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=ENV,
    )
    os.close(slave)
    seen = bytearray()
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        assert ready, f"no output for {timeout}s: {seen.decode(errors='replace')}"
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    code = proc.wait(timeout)
    reader.join(timeout)
    proc.stdout.close()  # type: ignore[union-attr]
    return code, out[0].decode(), seen.decode()


def run_piped(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )


# -- the bar itself ---------------------------------------------------------------------


def test_terminal_bar_shows_count_share_rate_and_eta() -> None:
    now = [0.0]
    out = io.StringIO()
    bar = ProgressBar("orders", "events", stream=out, tty=True, clock=lambda: now[0], width=10)
    bar.update(0, 1000, "BOOTSTRAPPING")
    now[0] = 2.0
    bar.update(500, 1000, "BOOTSTRAPPING")
    line = out.getvalue().split("\r")[-1]
    assert line.startswith("orders [#####.....] 500/1,000 events")
    assert " 50.0%" in line and "250 events/s" in line and "ETA 0:02" in line
    assert line.endswith("BOOTSTRAPPING\x1b[K")
    bar.finish("LIVE")
    assert out.getvalue().endswith("\norders: LIVE\n")


def test_plain_lines_at_most_one_a_second() -> None:
    now = [0.0]
    out = io.StringIO()
    bar = ProgressBar("t", "bytes", stream=out, tty=False, clock=lambda: now[0])
    bar.update(0, 100)
    now[0] = 0.5
    bar.update(50, 100)  # within the second: not printed
    now[0] = 1.5
    bar.update(60, 100)
    assert out.getvalue().splitlines() == [
        "t: 0/100 bytes 0.0%  0 bytes/s  ETA --",
        "t: 60/100 bytes 60.0%  40 bytes/s  ETA 0:01",
    ]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


# -- views watch, against a server whose answers the test scripts --------------------------


class _Views(BaseHTTPRequestHandler):
    """GET /views/orders answers the next scripted status (the last one from then on)."""

    script: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        status = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        body = json.dumps(status).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _status(state: str, applied: int, version: int = 1) -> dict[str, Any]:
    return {
        "name": "orders",
        "version": version,
        "state": state,
        "progress": applied / 4000,
        "events": {"total": 4000, "applied": applied},
    }


@pytest.fixture
def views_server() -> Iterator[str]:
    _Views.script = [
        _status("CREATED", 0),
        _status("BOOTSTRAPPING", 1000),
        _status("BOOTSTRAPPING", 2500),
        _status("LIVE", 4000),
    ]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Views)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_views_watch_draws_a_bar_on_a_terminal(views_server: str) -> None:
    code, out, terminal = run_on_terminal("views", "--url", views_server, "watch", "orders")
    assert code == 0, terminal
    frames = [f for f in terminal.split("\r") if f.startswith("orders [")]
    assert any("1,000/4,000 events" in f and "BOOTSTRAPPING" in f for f in frames), terminal
    assert any("2,500/4,000 events" in f and "ETA" in f for f in frames), terminal
    assert "orders: LIVE (version 1)" in terminal
    assert json.loads(out)["state"] == "LIVE"  # stdout: the result, as without progress


def test_views_watch_prints_plain_lines_when_not_on_a_terminal(views_server: str) -> None:
    run = run_piped("views", "--url", views_server, "watch", "orders")
    assert run.returncode == 0, run.stderr
    assert "\r" not in run.stderr and "\x1b" not in run.stderr
    lines = run.stderr.splitlines()
    assert lines[0] == "orders: 0/4,000 events 0.0%  0 events/s  ETA --  CREATED"
    assert lines[-1] == "orders: LIVE (version 1)"
    assert json.loads(run.stdout)["state"] == "LIVE"


def test_views_watch_fails_when_the_view_fails(views_server: str) -> None:
    _Views.script = [_status("BOOTSTRAPPING", 10), {**_status("FAILED", 10), "error": "boom"}]
    run = run_piped("views", "--url", views_server, "watch", "orders")
    assert run.returncode == 1
    assert "view orders is FAILED: boom" in run.stderr


# -- admin topics offload --wait, against a real standalone ------------------------------


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory, "--segment-max-entries", "20")


def _produce(server: StandaloneProcess, topic: str, n: int) -> None:
    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(b"%05d" % i + b"x" * 200)
    finally:
        client.close()


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_offload_wait_shows_progress_until_done(
    small_segments: StandaloneProcess, json_flag: list[str]
) -> None:
    topic = f"persistent://public/default/{unique('offload-wait')}"
    _produce(small_segments, topic, 100)  # 5 segments of 20 entries, all closed
    code, out, terminal = run_on_terminal(
        "admin", "--url", small_segments.http_url, *json_flag, "topics", "offload", topic, "--wait"
    )
    assert code == 0, terminal
    local = topic.rsplit("/", 1)[1]
    assert f"{local} [" in terminal and "bytes" in terminal, terminal
    assert f"{local}: SUCCESS (5 segments)" in terminal
    result = json.loads(out)  # the final status, printed as JSON in both modes
    assert result["status"] == "SUCCESS" and result["bytesQueued"] == 0
    assert result["segmentsOffloaded"] == 5


# -- views create --wait, against a real standalone running Spark -------------------------


@pytest.fixture(scope="module")
def with_views(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    args = ["--spark-master", "local[2]", "--views-max-batch-events", "500"]
    server = StandaloneProcess(tmp_path_factory.mktemp("views-progress"), extra_args=args)
    server.startup_timeout = 120
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_views_create_wait_follows_the_backfill_to_live(with_views: StandaloneProcess) -> None:
    topic = unique("txns")
    client = pulsar.Client(
        with_views.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        producer = client.create_producer(
            topic, schema=JsonSchema(h.Txn), batching_enabled=False, block_if_queue_full=True
        )
        for user, amount in h.events(3000, seed=7):
            producer.send_async(h.Txn(user=user, amount=amount), None)
        producer.flush()
    finally:
        client.close()
    sql = "SELECT data.user AS user, count(*) AS n FROM events GROUP BY data.user"
    code, out, terminal = run_on_terminal(
        "views", "--url", with_views.http_url, "create", "per_user", "--source", topic,
        "--sql", sql, "--key", "user", "--wait",
        timeout=300,
    )  # fmt: skip
    assert code == 0, terminal
    assert "per_user [" in terminal and "/3,000 events" in terminal, terminal
    assert "per_user: LIVE (version 1)" in terminal
    status = json.loads(out)
    assert status["state"] == "LIVE"
    assert status["events"] == {"total": 3000, "applied": 3000}


def test_produce_shows_its_rate_on_a_terminal(small_segments: StandaloneProcess) -> None:
    topic = f"persistent://public/default/{unique('produce-rate')}"
    url = ["--service-url", small_segments.pulsar_url]
    code, out, terminal = run_on_terminal("produce", topic, "-m", "x", "-n", "1500", *url)
    assert code == 0, terminal
    local = topic
    assert f"{local} [" in terminal and "msgs/s" in terminal, terminal
    assert "1,500/1,500 msgs" in terminal
    assert f"{local}: 1,500 sent, " in terminal
    assert out == "1500 messages successfully produced\n"  # stdout as without progress
    quiet = run_piped("produce", topic, "-m", "x", "-n", "3", *url)  # short: no progress
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
