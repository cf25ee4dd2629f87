"""The Spark source on a node with authentication and authorization on: the ``token``
option authenticates its plan requests; without it, or with a role that may not consume,
the read fails with the node's reason."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from pyspark.sql import SparkSession

from magnetar.core.tokens import create_token, secret_key
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, unique

pytestmark = pytest.mark.slow  # the run-wide Spark session may start here (10-30 s)


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StandaloneProcess, dict[str, str]]]:
    base = tmp_path_factory.mktemp("spark-auth")
    key = base / "secret.key"
    key.write_bytes(secret_key())
    server = StandaloneProcess(
        base / "data",
        extra_args=["--authentication-enabled", "true", "--token-secret-key", f"file://{key}",
                    "--authorization-enabled", "true", "--superuser-roles", "admin"],
    )  # fmt: skip
    server.start()
    try:
        yield server, {r: create_token(r, key.read_bytes()) for r in ("admin", "reader", "bob")}
    finally:
        server.stop()


def test_spark_reads_with_a_token(
    spark: SparkSession, node: tuple[StandaloneProcess, dict[str, str]]
) -> None:
    server, tokens = node
    topic = f"persistent://public/default/{unique('spark-auth')}"
    client = pulsar.Client(
        server.pulsar_url, authentication=pulsar.AuthenticationToken(tokens["admin"])
    )
    try:
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"m{i}".encode())
    finally:
        client.close()
    admin = AdminHttp(server.http_url, headers={"Authorization": f"Bearer {tokens['admin']}"})
    admin.ok("POST", f"/admin/v2/persistent/{topic[13:]}/permissions/reader", ["consume"])

    def read(token: str | None) -> int:
        reader = spark.read.format("magnetar").option("url", server.http_url)
        if token:
            reader = reader.option("token", token)
        return reader.option("topic", topic).load().count()

    assert read(tokens["reader"]) == 20
    with pytest.raises(Exception, match="authentication required"):
        read(None)
    with pytest.raises(Exception, match="not allowed to consume"):
        read(tokens["bob"])
