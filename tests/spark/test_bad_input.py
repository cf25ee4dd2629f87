"""Bad options and unreadable topics: a clear error on the driver, before any Spark job
(and so any task) runs; and bad subscription commits, refused whole."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession

from magnetar.testing.server import StandaloneProcess, free_port
from tests.spark.conftest import Admin, produce


@pytest.fixture
def no_jobs(spark: SparkSession) -> Iterator[None]:
    """Fails the test if the code under it started any Spark job."""
    group = f"bad-input-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "must stay empty")
    yield
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
    spark.sparkContext.setJobGroup("", "")


BATCH_CASES = {
    "unknown-topic": (
        {"topic": "no_such_topic"},
        "topic persistent://public/default/no_such_topic does not exist",
    ),
    "offsets-not-json": (
        {"topic": "t", "startingOffsets": "{oops"},
        "option startingOffsets must be earliest, latest or JSON like",
    ),
    "offset-not-integer": (
        {"topic": "t", "endingOffsets": '{"t": {"0": "ten"}}'},
        "option endingOffsets must be earliest, latest or JSON like",
    ),
    "ending-earliest": ({"topic": "t", "endingOffsets": "earliest"}, "cannot be earliest"),
    "two-topic-options": ({"topic": "t", "topics": "a,b"}, "give exactly one of the options"),
    "fail-on-data-loss": ({"topic": "t", "failOnDataLoss": "maybe"}, "must be true or false"),
    "zero-rate-limit": ({"topic": "t", "maxOffsetsPerTrigger": "0"}, "must be > 0"),
    "timestamp-not-integer": (
        {"topic": "t", "startingTimestamp": "yesterday"},
        "option startingTimestamp must be an integer",
    ),
    "pattern-matches-nothing": (
        {"topicsPattern": "^nothing-matches-this$"},
        "no topic matches topicsPattern",
    ),
}


@pytest.mark.parametrize(("options", "message"), BATCH_CASES.values(), ids=BATCH_CASES.keys())
def test_batch_read_refused_at_load(
    spark: SparkSession,
    server: StandaloneProcess,
    no_jobs: None,
    options: dict[str, str],
    message: str,
) -> None:
    reader = spark.read.format("magnetar").option("url", server.http_url).options(**options)
    with pytest.raises(AnalysisException) as refused:
        reader.load()
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("offset long, nope int", "schema column 'nope' is not one of the source's: key, value"),
        ("offset string", "schema column 'offset' must have the type int64, not string"),
    ],
    ids=["unknown-column", "wrong-type"],
)
def test_user_schema_refused_before_any_task(
    spark: SparkSession,
    server: StandaloneProcess,
    admin: Admin,
    no_jobs: None,
    schema: str,
    message: str,
) -> None:
    topic = f"bad_schema_{uuid.uuid4().hex[:8]}"
    admin.call("PUT", f"/admin/v2/persistent/public/default/{topic}")
    df = spark.read.format("magnetar").schema(schema).option("url", server.http_url)
    with pytest.raises(AnalysisException) as refused:
        df.option("topic", topic).load().collect()
    assert message in str(refused.value)


def test_unreachable_url_refused_at_load(spark: SparkSession, no_jobs: None) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    reader = spark.read.format("magnetar").option("url", url).option("topic", "t")
    with pytest.raises(AnalysisException) as refused:
        reader.load()
    assert f"cannot reach Magnetar at {url}/magnetar/v1/topics/public/default/t/plan" in str(
        refused.value
    )
    assert "check the url option" in str(refused.value)


@pytest.mark.slow
def test_ending_offsets_on_a_stream_fails_the_query_before_any_batch(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, no_jobs: None
) -> None:
    topic = f"bad_stream_{uuid.uuid4().hex[:8]}"
    admin.call("PUT", f"/admin/v2/persistent/public/default/{topic}")
    query = (
        spark.readStream.format("magnetar")
        .option("url", server.http_url)
        .option("topic", f"persistent://public/default/{topic}")
        .option("endingOffsets", "latest")
        .load()
        .writeStream.format("memory")
        .queryName("bad_stream")
        .start()
    )
    with pytest.raises(
        StreamingQueryException, match="endingOffsets is not allowed in a streaming"
    ):
        query.awaitTermination(60)
    assert query.recentProgress == []


def test_sink_without_a_value_column_is_refused(
    spark: SparkSession, server: StandaloneProcess
) -> None:
    df = spark.createDataFrame([(1,)], "payload int")
    writer = df.write.format("magnetar").option("url", server.http_url).option("topic", "t")
    with pytest.raises(AnalysisException, match="the magnetar sink needs a column named value"):
        writer.mode("append").save()


def test_subscription_commit_past_the_end_is_refused_and_changes_nothing(
    server: StandaloneProcess, admin: Admin, client: pulsar.Client
) -> None:
    topic = f"bad_commit_{uuid.uuid4().hex[:8]}"
    admin.call("PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 2)
    for p in (0, 1):
        produce(client, f"{topic}-partition-{p}", [b"x"] * 5)
    url = f"{server.http_url}/magnetar/v1/topics/public/default/{topic}/subscription/s/commit"
    admin.call("POST", url.removeprefix(server.http_url), {"offsets": {"0": 3}})
    assert admin.backlog(f"{topic}-partition-0", "s") == 2
    for offsets, reason in [
        ({"0": 5, "1": 6}, "bad commit for partition '1': 6 is past the end (5)"),
        ({"0": 4, "2": 1}, "bad commit for partition '2'"),
        ({"0": "4"}, "bad commit for partition '0'"),
    ]:
        request = urllib.request.Request(
            url, data=json.dumps({"offsets": offsets}).encode(), method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        with refused.value:
            assert refused.value.code == 400
            assert reason in json.loads(refused.value.read())["reason"]
    assert admin.backlog(f"{topic}-partition-0", "s") == 2  # the refused commits moved nothing
