"""Kafka record headers ↔ Pulsar message properties, without loss. Pure code.

Kafka headers are an ordered list of (name, bytes or null) where names may repeat; Pulsar
properties are text → text, and clients hand them out as a dict. The mapping:

- Each header becomes a property of the same name: its value as text when it is UTF-8, as
  base64 text when it is not, "" when it is null. When a name repeats, its first value wins.
- When that plain form loses anything (a value that is not UTF-8 or is null, a repeated name,
  or a name equal to :data:`EXACT`), one more property, :data:`EXACT`, carries the exact list
  as JSON: ``[[name, base64 value or null], ...]``.
- Back (Pulsar → Kafka): a message with a readable :data:`EXACT` gets exactly those headers;
  otherwise each property becomes a header with its text as UTF-8 bytes.

So a Kafka record read by a Pulsar client and sent again with the same properties reaches
Kafka consumers with byte-identical headers, and plain text headers stay plain properties.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable

EXACT = "__kafka_headers"
Headers = tuple[tuple[str, bytes | None], ...]


def to_properties(headers: Iterable[tuple[str, bytes | None]]) -> list[tuple[str, str]]:
    """The Pulsar properties of a record's ``headers`` (see the module docstring)."""
    headers = tuple(headers)
    plain: dict[str, str] = {}
    exact_needed = False
    for name, value in headers:
        text = _text(value)
        exact_needed |= text is None or value is None or name in plain or name == EXACT
        if name not in plain:
            plain[name] = text if text is not None else base64.b64encode(value or b"").decode()
    props = [(name, text) for name, text in plain.items() if name != EXACT]
    if exact_needed:
        props.append((EXACT, json.dumps([[n, _b64(v)] for n, v in headers])))
    return props


def to_headers(properties: Iterable[tuple[str, str]]) -> Headers:
    """The Kafka headers of a message's ``properties`` (see the module docstring)."""
    props = list(properties)
    exact = next((value for name, value in props if name == EXACT), None)
    if exact is not None:
        decoded = _exact(exact)
        if decoded is not None:
            return decoded
    return tuple((name, value.encode()) for name, value in props)


def _text(value: bytes | None) -> str | None:
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _exact(text: str) -> Headers | None:
    """The header list an EXACT property holds; None if it is not one (then the properties
    are taken as plain text, as for any Pulsar message)."""
    try:
        raw = json.loads(text)
        return tuple(
            (str(name), None if value is None else base64.b64decode(value, validate=True))
            for name, value in raw
        )
    except (ValueError, TypeError, binascii.Error):
        return None
