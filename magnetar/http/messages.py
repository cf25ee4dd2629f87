"""``GET /magnetar/v1/topics/{tenant}/{namespace}/{topic}/messages``: browse a topic.

Pulsar's ``peek``/``examinemessage`` answer one raw message with its metadata in headers;
the console wants a page of them, decoded. Query: ``position=newest`` (default: the last
``limit`` messages), ``earliest`` or an offset; or ``time=MS`` (the first message published
at or after it); ``limit`` (1..500, default 20). Each message comes with its offset, Pulsar
message id, times, key, properties, producer and value, decoded by the topic's schema: JSON
(``encoding: json``), text (``text``) or, for bytes that are neither, base64 (``base64``).

Read-only: it moves no cursor and changes nothing.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.errors import InvalidRequestError, TopicNotFoundError
from magnetar.broker.topic import Topic
from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.http.routes import Route, ok
from magnetar.http.topics import topic_of

MAX_LIMIT = 500
TEXT_TYPES = ("STRING", "JSON")


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
        found = await broker.schemas.get(name.path)
        schema = found[1].type if found else "NONE"
        rows = await _read(topic, start, limit, schema)
        ledger = topic.ledger
        return ok(
            {
                "startOffset": ledger.start_offset,
                "endOffset": ledger.end_offset,
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
    ledger = topic.ledger
    if "time" in query:
        return await ledger.find_offset(_int(query["time"], "time"))
    position = query.get("position", "newest")
    if position == "newest":
        return max(ledger.start_offset, ledger.end_offset - limit)
    if position == "earliest":
        return ledger.start_offset
    return max(ledger.start_offset, _int(position, "position"))


async def _read(topic: Topic, start: int, limit: int, schema: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset, end = start, topic.ledger.end_offset
    while len(out) < limit and offset < end:
        entries = await topic.ledger.read(offset, max_entries=limit)
        if not entries:
            break
        for entry in entries:
            out += _messages(topic, entry, offset, schema)
            offset = entry.next_offset
    return out[:limit]


def _messages(topic: Topic, entry: Entry, start: int, schema: str) -> list[dict[str, Any]]:
    rows = formats.unpack(entry.format, entry.payload)
    out = []
    for i, row in enumerate(rows):
        offset = entry.base_offset + i
        if offset < start:
            continue
        mid = topic.ledger.message_id(entry, i if row.batch_size >= 0 else -1)
        value, encoding = decode(row.value, schema)
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


def decode(raw: bytes, schema: str) -> tuple[Any, str]:
    """A value as the console shows it: JSON, text, or base64 for other bytes."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), "base64"
    if schema == "JSON" or (schema not in TEXT_TYPES and text[:1] in "{["):
        try:
            return json.loads(text), "json"
        except ValueError:
            pass
    return text, "text"
