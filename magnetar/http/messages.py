"""``GET /magnetar/v1/topics/{tenant}/{namespace}/{topic}/messages``: browse a topic.

Pulsar's ``peek``/``examinemessage`` answer one raw message with its metadata in headers;
the console wants a page of them, decoded. Query: ``position=newest`` (default: the last
``limit`` messages), ``earliest`` or an offset; or ``time=MS`` (the first message published
at or after it); ``limit`` (1..500, default 20). Each message comes with its offset, Pulsar
message id, times, key, properties, producer and value, decoded by the topic's schema (the
version the message was written with) — see :mod:`magnetar.http.values` for the encodings:
JSON, Avro records, Pulsar's primitive schemas, text, and base64 where nothing better exists.
Kafka transactions are shown as readers get them (:mod:`magnetar.broker.transactions`):
nothing at or after the last stable offset (``lastStableOffset``), no markers, nothing of an
aborted transaction.

Read-only: it moves no cursor and changes nothing.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.errors import InvalidRequestError, TopicNotFoundError
from magnetar.broker.schemas import SchemaInfo
from magnetar.broker.topic import Topic
from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.http.routes import Route, ok
from magnetar.http.topics import topic_of
from magnetar.http.values import decode, parse_avro

MAX_LIMIT = 500


def routes(broker: Broker) -> list[Route]:
    async def messages(request: web.Request) -> web.Response:
        name = topic_of(request)
        if not await broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        topic = await broker.get_topic(name, create=False)
        limit = _int(request.query.get("limit", "20"), "limit")
        if not 0 < limit <= MAX_LIMIT:
            raise InvalidRequestError(f"limit must be in 1..{MAX_LIMIT}, got {limit}")
        start = await _start(topic, request.query, limit)
        versions = await broker.schemas.versions(name.path)
        schema = versions[-1].type if versions else "NONE"
        rows = await _read(topic, start, limit, Decoder(versions))
        return ok(
            {
                "startOffset": topic.start_offset,
                "endOffset": topic.end_offset,
                "lastStableOffset": topic.txns.last_stable() if topic.txns else topic.end_offset,
                "schema": schema,
                "messages": rows,
            }
        )

    return [
        Route(
            "GET",
            "/magnetar/v1/topics/{tenant}/{namespace}/{topic}/messages",
            messages,
            "Browse messages (?position=newest|earliest|OFFSET, ?time=MS, ?limit=N), decoded",
        )
    ]


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidRequestError(f"{what} must be an integer, got {text!r}") from None


async def _start(topic: Topic, query: Any, limit: int) -> int:
    if "time" in query:
        return await topic.find_offset(_int(query["time"], "time"))
    position = query.get("position", "newest")
    if position == "newest":
        return max(topic.start_offset, topic.end_offset - limit)
    if position == "earliest":
        return topic.start_offset
    return max(topic.start_offset, _int(position, "position"))


class Decoder:
    """Decodes values with the schema version each message names (the newest when it
    names none); Avro schemas are parsed once per request."""

    def __init__(self, versions: list[SchemaInfo]) -> None:
        self.versions = versions
        self._avro: dict[int, Any] = {}

    def __call__(self, raw: bytes, version: int | None) -> tuple[Any, str]:
        if not self.versions:
            return decode(raw, "NONE")
        v = version if version is not None and 0 <= version < len(self.versions) else -1
        v = v % len(self.versions)
        info = self.versions[v]
        if info.type != "AVRO":
            return decode(raw, info.type)
        if v not in self._avro:
            try:
                self._avro[v] = parse_avro(info.data)
            except ValueError:
                self._avro[v] = None  # shown as base64
        return decode(raw, "AVRO", self._avro[v])


async def _read(topic: Topic, start: int, limit: int, decoder: Decoder) -> list[dict[str, Any]]:
    """Up to ``limit`` messages from ``start``, as a reader gets them: up to the last stable
    offset, without Kafka transaction markers and aborted transactions."""
    out: list[dict[str, Any]] = []
    txns = topic.txns if topic.txns is not None and topic.txns.used else None
    offset = start
    end = txns.last_stable() if txns is not None else topic.end_offset
    while len(out) < limit and offset < end:
        entries = await topic.read(offset, max_entries=limit)
        if not entries:
            break
        for entry in entries:
            if entry.base_offset >= end:
                break
            if txns is None or not txns.hides(entry):
                out += _messages(topic, entry, offset, decoder)
            offset = entry.next_offset
    return out[:limit]


def _messages(topic: Topic, entry: Entry, start: int, decoder: Decoder) -> list[dict[str, Any]]:
    rows = formats.unpack(entry.format, entry.payload)
    out = []
    for i, row in enumerate(rows):
        offset = entry.base_offset + i
        if offset < start:
            continue
        mid = topic.message_id(entry, i if row.batch_size >= 0 else -1)
        value, encoding = decoder(row.value, row.schema_version)
        out.append(
            {
                "offset": offset,
                "messageId": f"{mid.ledger_id}:{mid.entry_id}"
                + (f":{mid.batch_index}" if mid.batch_index >= 0 else ""),
                "publishTime": entry.publish_time,
                "eventTime": row.event_time if row.event_time >= 0 else None,
                "key": row.key,
                "properties": row.properties,
                "producerName": row.producer_name,
                "sequenceId": row.sequence_id,
                "size": len(row.value),
                "value": value,
                "encoding": encoding,
            }
        )
    return out
