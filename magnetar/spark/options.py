"""Options of the ``magnetar`` Spark source, validated before any task runs.

Names follow Spark's Kafka source where the meaning is the same. Option names are
case-insensitive, as everywhere in Spark: PySpark hands a data source its options with
lower-cased keys, so every look-up here goes through :func:`normalize`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.core.names import TopicName

EARLIEST, LATEST = "earliest", "latest"


class SparkSourceError(MagnetarError):
    """A bad option or an unreadable topic, reported on the driver before any task runs."""

    code = "spark.source"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


@dataclass(frozen=True)
class ReadOptions:
    url: str
    topics: tuple[str, ...]
    pattern: str | None
    starting: str | dict[str, dict[str, int]]
    ending: str | dict[str, dict[str, int]]
    starting_ts: int | None
    ending_ts: int | None
    max_per_trigger: int | None
    fail_on_data_loss: bool
    subscription: str | None
    min_partitions: int | None
    token: str | None = None  # sent as Authorization: Bearer (option "token")


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """The options keyed by lower-cased name (``startingOffsets`` → ``startingoffsets``)."""
    return {str(k).lower(): v for k, v in options.items()}


def _int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SparkSourceError(f"option {name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise SparkSourceError(f"option {name} must be >= 0, got {value}")
    return value


def _offsets(
    options: Mapping[str, str], name: str, default: str
) -> str | dict[str, dict[str, int]]:
    raw = options.get(name.lower(), default).strip()
    if raw.lower() in (EARLIEST, LATEST):
        return raw.lower()
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
        return {
            str(topic): {str(int(p)): int(o) for p, o in parts.items()}
            for topic, parts in parsed.items()
        }
    except (ValueError, AttributeError, TypeError) as e:
        raise SparkSourceError(
            f"option {name} must be earliest, latest or JSON like "
            f'{{"topic": {{"0": 42}}}}; got {raw!r} ({e})'
        ) from None


def check_topic_option(topic: str) -> str:
    """``topic`` if it is a legal topic name, else SparkSourceError saying why (the same
    rules as every other entry point: magnetar.core.names)."""
    try:
        TopicName.parse(topic)
    except InvalidNameError as e:
        raise SparkSourceError(f"option topic: {e}") from None
    return topic


def parse(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check every read option; raises SparkSourceError naming the bad one."""
    opts = normalize(options)
    given = [k for k in ("topic", "topics", "topicspattern") if opts.get(k)]
    if len(given) != 1:
        raise SparkSourceError("give exactly one of the options topic, topics or topicsPattern")
    topics: tuple[str, ...] = ()
    if "topic" in given:
        topics = (opts["topic"].strip(),)
    elif "topics" in given:
        topics = tuple(t.strip() for t in opts["topics"].split(",") if t.strip())
    for topic in topics:
        check_topic_option(topic)
    if streaming and "endingoffsets" in opts:
        raise SparkSourceError("endingOffsets is not allowed in a streaming query")
    if streaming and "endingtimestamp" in opts:
        raise SparkSourceError("endingTimestamp is not allowed in a streaming query")
    fail = opts.get("failondataloss", "true").lower()
    if fail not in ("true", "false"):
        raise SparkSourceError(f"option failOnDataLoss must be true or false, got {fail!r}")
    ending = _offsets(opts, "endingOffsets", LATEST)
    if ending == EARLIEST:
        raise SparkSourceError("endingOffsets cannot be earliest")
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger")
    if max_per_trigger == 0:
        raise SparkSourceError("option maxOffsetsPerTrigger must be > 0")
    return ReadOptions(
        token=opts.get("token") or None,
        url=opts.get("url", "http://localhost:8080").rstrip("/"),
        topics=topics,
        pattern=opts.get("topicspattern"),
        starting=_offsets(opts, "startingOffsets", LATEST if streaming else EARLIEST),
        ending=ending,
        starting_ts=_int(opts, "startingTimestamp"),
        ending_ts=_int(opts, "endingTimestamp"),
        max_per_trigger=max_per_trigger,
        fail_on_data_loss=fail == "true",
        subscription=opts.get("subscription") or None,
        min_partitions=_int(opts, "minPartitions"),
    )
