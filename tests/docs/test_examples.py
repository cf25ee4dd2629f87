"""Every example in README.md and docs/ is marked, and those marked ``<!-- run -->`` run as
written against a real standalone (see tests/docs/examples.py for the convention): shell
blocks with bash (``-e``: every command must succeed), Python blocks with this interpreter,
each in a scratch directory, with the standalone's address in the environment a user would
set (MAGNETAR_URL, MAGNETAR_*_PORT) and the venv's ``bin`` first on PATH, PYSPARK_PYTHON
unset. Blocks of a page run in page order against the same server."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.core.config import build_settings
from magnetar.testing.server import REPO, StandaloneProcess
from tests.docs.examples import CODE, Block, all_blocks

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.mark == "run" and b.lang in CODE]
TIMEOUT = 600


def test_every_code_example_is_marked_run_or_skip() -> None:
    unmarked = [b.where for b in BLOCKS if b.lang in CODE and b.mark is None]
    assert not unmarked, f"mark these <!-- run --> or <!-- skip: why -->: {unmarked}"
    assert all(b.reason for b in BLOCKS if b.mark == "skip"), "a skip says why"
    assert RUN, "some examples run"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "toml"], ids=lambda b: b.where)
def test_toml_examples_are_valid_settings(block: Block, tmp_path: Path) -> None:
    tomllib.loads(block.code)
    path = tmp_path / "magnetar.toml"
    path.write_text(block.code)
    build_settings(config_file=path, env={})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    args = ["--spark-master", "local[2]"]
    proc = StandaloneProcess(tmp_path_factory.mktemp("docs-standalone"), extra_args=args)
    proc.startup_timeout = 120
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _env(server: StandaloneProcess) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAGNETAR_", "PYSPARK_"))}
    env.pop("PYTHONPATH", None)
    return env | {
        "PATH": os.pathsep.join([venv_bin, env.get("PATH", "")]),
        "MAGNETAR_URL": server.http_url,
        "MAGNETAR_BIND_ADDRESS": "127.0.0.1",
        "MAGNETAR_PULSAR_PORT": str(server.pulsar_port),
        "MAGNETAR_HTTP_PORT": str(server.http_port),
        "MAGNETAR_KAFKA_PORT": str(server.kafka_port),
        "MAGNETAR_FLIGHT_PORT": str(server.flight_port),
        "MAGNETAR_DATA_DIR": str(server.data_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.where)
def test_the_example_runs(block: Block, server: StandaloneProcess, tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(REPO / ".venv")  # README's .venv/bin/magnetar
    if block.lang in ("python", "py"):
        script = tmp_path / "example.py"
        script.write_text(block.code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    run = subprocess.run(
        command,
        cwd=tmp_path,
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert run.returncode == 0, (
        f"{block.where} failed ({run.returncode}):\n{block.code}\n--- stdout\n"
        f"{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-5000:]}"
    )
