"""What a new user meets in the first hour with the ``magnetar`` command (issue 18), each as
a real subprocess against a real standalone: a second server on a used data directory, a
port already in use, produce/consume finding a server whose ports moved."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.cli.rest import AdminCallError, RestClient
from magnetar.testing.server import REPO, StandaloneProcess, free_port

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def magnetar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV, **(env or {})},
    )


def _ports() -> list[str]:
    return [
        *("--pulsar-port", str(free_port()), "--http-port", str(free_port())),
        *("--kafka-port", str(free_port()), "--flight-port", str(free_port())),
    ]


def _one_line_failure(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr + run.stdout, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("magnetar: error: "), run
    return lines[0]


def test_a_second_server_on_a_used_directory_exits_naming_the_holder(
    standalone: StandaloneProcess, tmp_path: Path
) -> None:
    assert standalone.proc is not None
    pid = standalone.proc.pid
    started = time.monotonic()
    run = magnetar("standalone", "--data-dir", str(standalone.data_dir), *_ports())
    line = _one_line_failure(run)
    assert time.monotonic() - started < 30, "it exits at once, it does not wait for the lock"
    assert f"pid {pid}" in line and str(standalone.data_dir.resolve()) in line
    assert "--data-dir" in line and "MAGNETAR_DATA_DIR" in line
    # a separate data directory sharing only the journal directory is refused too
    journal = str(standalone.data_dir / "journal")
    run = magnetar("standalone", "--data-dir", str(tmp_path), "--journal-dir", journal, *_ports())
    line = _one_line_failure(run)
    assert f"pid {pid}" in line and "--journal-dir" in line
    assert not (tmp_path / "metadata.db").exists(), "the refused node opened nothing"
    assert standalone.proc.poll() is None, "the first server runs on"


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.mark.parametrize("setting", ["pulsar_port", "kafka_port", "http_port", "flight_port"])
def test_a_port_in_use_is_one_line_naming_the_setting(
    setting: str, taken_port: int, tmp_path: Path
) -> None:
    flag = "--" + setting.replace("_", "-")
    ports = _ports()
    ports[ports.index(flag) + 1] = str(taken_port)
    run = magnetar("standalone", "--data-dir", str(tmp_path), "--bind-address", "127.0.0.1", *ports)
    line = _one_line_failure(run)
    assert f"port {taken_port} ({setting}) is already in use on 127.0.0.1:{taken_port}" in line
    assert flag in line and f"MAGNETAR_{setting.upper()}" in line
    assert run.stdout == ""


def test_a_port_set_in_the_environment_is_named_too(taken_port: int, tmp_path: Path) -> None:
    run = magnetar(
        "standalone",
        "--data-dir",
        str(tmp_path),
        "--bind-address",
        "127.0.0.1",
        *_without(_ports(), "--kafka-port"),
        env={"MAGNETAR_KAFKA_PORT": str(taken_port)},
    )
    assert "MAGNETAR_KAFKA_PORT" in _one_line_failure(run)


def _without(args: list[str], flag: str) -> list[str]:
    at = args.index(flag)
    return args[:at] + args[at + 2 :]


def test_produce_and_consume_use_the_port_from_the_environment(
    standalone: StandaloneProcess,
) -> None:
    env = {"MAGNETAR_PULSAR_PORT": str(standalone.pulsar_port)}
    run = magnetar("produce", "moved-env", "-m", "hello", "-n", "3", env=env)
    assert (run.returncode, run.stdout, run.stderr) == (0, "3 messages successfully produced\n", "")
    run = magnetar("consume", "moved-env", "-s", "s", "-p", "Earliest", "-n", "3", env=env)
    assert run.returncode == 0 and run.stderr == "", run
    assert run.stdout.splitlines() == ["----- got message -----", "key:[], content:hello"] * 3


def test_produce_and_consume_use_the_config_file(
    standalone: StandaloneProcess, tmp_path: Path
) -> None:
    config = tmp_path / "magnetar.toml"
    config.write_text(f'bind_address = "127.0.0.1"\npulsar_port = {standalone.pulsar_port}\n')
    run = magnetar("produce", "moved-toml", "-m", "hi", "--config", str(config), "--json")
    assert run.returncode == 0 and run.stderr == "", run
    assert list(json.loads(run.stdout)) == ["messageId"], "stdout is the JSON alone"
    run = magnetar("consume", "moved-toml", "-s", "s", "-p", "Earliest", "-c", str(config))
    assert run.returncode == 0 and "content:hi" in run.stdout, run


def test_an_unreachable_server_fails_fast_with_one_line() -> None:
    port = free_port()
    started = time.monotonic()
    run = magnetar("produce", "nowhere", "-m", "x", env={"MAGNETAR_PULSAR_PORT": str(port)})
    line = _one_line_failure(run)
    assert time.monotonic() - started < 10
    assert f"cannot reach pulsar://127.0.0.1:{port} — is `magnetar standalone` running?" in line
    assert "MAGNETAR_PULSAR_PORT" in line and run.stdout == ""
    run = magnetar("consume", "nowhere", "-s", "s", "--service-url", f"pulsar://127.0.0.1:{port}")
    assert "comes from --service-url" in _one_line_failure(run)


def test_admin_and_views_use_the_http_port_from_the_environment(
    standalone: StandaloneProcess,
) -> None:
    env = {"MAGNETAR_HTTP_PORT": str(standalone.http_port)}
    run = magnetar("admin", "tenants", "list", env=env)
    assert run.returncode == 0 and "public" in run.stdout.split(), run
    run = magnetar("views", "list", env=env)
    assert run.returncode == 0 and json.loads(run.stdout) == [], run
    run = magnetar("admin", "tenants", "list", env={"MAGNETAR_HTTP_PORT": str(free_port())})
    assert "cannot reach Magnetar at http://127.0.0.1:" in _one_line_failure(run)


def test_the_readme_commands_on_a_partitioned_topic(standalone: StandaloneProcess) -> None:
    env = {
        "MAGNETAR_PULSAR_PORT": str(standalone.pulsar_port),
        "MAGNETAR_HTTP_PORT": str(standalone.http_port),
    }
    topic = "persistent://public/default/orders"
    for args in (
        ("admin", "topics", "create-partitioned-topic", topic, "-p", "3"),
        ("produce", "orders", "-m", "hello", "-n", "10"),
        ("consume", "orders", "-s", "reader", "-p", "Earliest", "-n", "10"),
    ):
        run = magnetar(*args, env=env)
        assert run.returncode == 0 and run.stderr == "", run
    run = magnetar("admin", "--json", "topics", "stats", "orders", env=env)
    assert run.returncode == 0, run
    stats = json.loads(run.stdout)
    assert stats["msgInCounter"] == 10 and stats["metadata"] == {"partitions": 3}
    assert stats["subscriptions"]["reader"]["msgBacklog"] == 0
    assert "partitions" not in stats, "the summary; --per-partition adds each one"
    run = magnetar("admin", "topics", "partitioned-stats", "orders", "--per-partition", env=env)
    each = json.loads(run.stdout)["partitions"]
    assert sorted(each) == [f"{topic}-partition-{i}" for i in range(3)]
    assert sum(s["msgInCounter"] for s in each.values()) == 10
    run = magnetar("admin", "topics", "stats-internal", "orders", env=env)
    assert len(json.loads(run.stdout)["partitions"]) == 3, run
    with pytest.raises(AdminCallError) as refused:
        RestClient(standalone.http_url).call(
            "GET", "/admin/v2/persistent/public/default/orders/stats"
        )
    reason = str(refused.value)
    assert "HTTP 404" in reason and "is a partitioned topic (3 partitions)" in reason
    assert "orders/partitioned-stats" in reason and "orders-partition-0/stats" in reason
    run = magnetar("admin", "topics", "stats", f"{topic}-partition-1", env=env)
    assert run.returncode == 0 and json.loads(run.stdout)["msgInCounter"] > 0, run
