"""A Spark job as a user writes it, run as ``.venv/bin/python job.py`` without the venv
activated and without PYSPARK_PYTHON (issue 18 item 7a): ``import magnetar.spark`` is all
it takes for the source and the sink to be found and to run in Spark's Python workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.spark.conftest import Admin, produce

pytestmark = pytest.mark.slow

JOB = """
import sys

import magnetar.spark  # noqa: F401  (before the session: its workers get this interpreter)
from pyspark.sql import SparkSession

url, topic, out = sys.argv[1:4]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
df = spark.read.format("magnetar").option("url", url).option("topic", topic).load()
print("READ", df.count(), flush=True)
df.select("value").write.format("magnetar").option("url", url).option("topic", out).mode(
    "append"
).save()
print("WROTE", flush=True)
spark.stop()
"""


def test_a_job_run_by_the_venv_python_alone_finds_the_source(
    server: StandaloneProcess, admin: Admin, client: pulsar.Client, topic: str, tmp_path: Path
) -> None:
    produce(client, topic, [f"m{i}".encode() for i in range(7)])
    job = tmp_path / "job.py"
    job.write_text(JOB)
    venv_bin = str(Path(sys.executable).parent)
    unset = ("PYSPARK_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    run = subprocess.run(
        [sys.executable, str(job), server.http_url, topic, f"{topic}_out"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "READ 7" in run.stdout and "WROTE" in run.stdout, run.stdout
    assert admin.partition(f"{topic}_out")["end"] == 7
