"""``df.write.format("magnetar")`` and ``writeStream.format("magnetar")``: exactly once.

Columns: ``value`` (binary or string, required), ``key``, ``properties`` (map), ``eventTime``.
Each task produces under a deterministic producer name — one per query (or write, see the
option ``writeId``) and Spark partition — with sequence ids derived from the micro-batch id
and the row's index, so a replayed batch or a retried task sends the very same (producer,
sequence) pairs and the broker's deduplication drops them. That needs deduplication on for
the target topic: when it is not (Magnetar's default, as Pulsar's), the writer turns it on
for that topic alone — a topic policy, logged as a warning, undone with ``magnetar admin
topics remove-deduplication TOPIC`` — so the first write succeeds without losing the
guarantee; a topic whose own policy turns it off is refused with instructions. Option
``exactlyOnce=false`` skips all this and writes at-least-once.

A replay — the broker reports (``last_sequence_id``) rows of this micro-batch stored
already under this producer name — sends without client-side batching: the broker judges
a batch by its first sequence id, so a batch straddling the stored prefix of a
half-written task would be dropped whole, losing its new rows. One message per entry lets
the broker drop exactly the stored ones.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from magnetar.core.names import TopicName
from magnetar.spark.options import SparkSourceError, check_topic_option, normalize
from magnetar.spark.planning import http_get, http_post

log = logging.getLogger(__name__)

# Sequence ids of micro-batch b: b * 2**32 + 1 + row index. Never 0: pulsar-client treats
# sequence_id=0 as "not given" and would number that message itself.
BATCH_STRIDE = 1 << 32


@dataclass
class WriteResult(WriterCommitMessage):
    rows: int


class _Target:
    """Where and how a write goes; checked on the driver, used on the executors."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        options = normalize(options)
        self.topic = options.get("topic")
        if not self.topic:
            raise SparkSourceError("the magnetar sink needs the option topic")
        check_topic_option(self.topic)
        if "value" not in schema.fieldNames():
            raise SparkSourceError("the magnetar sink needs a column named value")
        self.url = options.get("url", "http://localhost:8080").rstrip("/")
        self.service_url = options.get("serviceurl") or self._lookup()
        self.write_id = options.get("writeid") or uuid.uuid4().hex[:12]
        if options.get("exactlyonce", "true").lower() == "true":
            self._ensure_dedup()

    def _lookup(self) -> str:
        name = TopicName.parse(str(self.topic))
        answer = http_get(f"{self.url}/lookup/v2/topic/persistent/{name.path}")
        return str(answer["brokerUrl"])

    def _ensure_dedup(self) -> None:
        """Make sure the broker deduplicates the target topic (see the module docstring)."""
        name = TopicName.parse(str(self.topic))
        policy = f"{self.url}/admin/v2/persistent/{name.path}/deduplicationEnabled"
        if http_get(policy + "?applied=true") is True:
            return
        if http_get(policy) is False:
            raise SparkSourceError(
                f"exactly-once writes need deduplication, which topic {name} turns off: run "
                f"`magnetar admin topics set-deduplication {name} --enable` (or "
                "remove-deduplication), or set the option exactlyOnce=false (at-least-once)"
            )
        http_post(policy, True)
        log.warning(
            "the magnetar sink turned deduplication on for topic %s, which its exactly-once "
            "writes need (a topic policy; `magnetar admin topics remove-deduplication %s` "
            "undoes it)",
            name,
            name,
        )

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or 0) if ctx else 0
        query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or self.write_id
        name = f"spark-{query}-{partition}"
        return WriteResult(_produce(self.service_url, str(self.topic), name, batch, iterator))


class MagnetarWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.target = _Target(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return self.target.write(iterator)


class MagnetarStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.target = _Target(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return self.target.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None  # durable already: each task's messages were acknowledged by the broker

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None  # a replay resends the same sequence ids; the broker drops duplicates


def _produce(service_url: str, topic: str, name: str, batch: int, rows: Iterator[Any]) -> int:
    import pulsar

    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    errors: list[str] = []
    lock = threading.Lock()

    def done(result: Any, _msg_id: Any) -> None:
        if result != pulsar.Result.Ok:
            with lock:
                errors.append(str(result))

    try:
        producer = _producer(client, topic, name, batching=True)
        if producer.last_sequence_id() > batch * BATCH_STRIDE:  # a replay of this batch
            producer.close()
            producer = _producer(client, topic, name, batching=False)
        count = 0
        for i, row in enumerate(rows):
            sequence_id = batch * BATCH_STRIDE + 1 + i
            producer.send_async(_value(row), done, sequence_id=sequence_id, **_extras(row))
            count += 1
        producer.flush()
        producer.close()
    finally:
        client.close()
    if errors:
        raise SparkSourceError(f"{len(errors)} message(s) to {topic} failed: {errors[0]}")
    return count


def _producer(client: Any, topic: str, name: str, *, batching: bool) -> Any:
    return client.create_producer(
        topic,
        producer_name=name,
        batching_enabled=batching,
        batching_max_publish_delay_ms=5,
        max_pending_messages=0,
        block_if_queue_full=True,
    )


def _value(row: Any) -> bytes:
    value = row["value"]
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else bytes(value)


def _extras(row: Any) -> dict[str, Any]:
    fields = row.asDict() if hasattr(row, "asDict") else {}
    extras: dict[str, Any] = {}
    if fields.get("key") is not None:
        extras["partition_key"] = str(fields["key"])
    if fields.get("properties"):
        extras["properties"] = {str(k): str(v) for k, v in fields["properties"].items()}
    event = fields.get("eventTime")
    if event is not None:
        extras["event_timestamp"] = int(event.timestamp() * 1000)
    return extras
