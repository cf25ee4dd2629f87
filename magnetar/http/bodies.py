"""Request bodies of the REST API, read the one way every call reads them.

A body is at most :data:`MAX_BODY_BYTES` (larger: 413), UTF-8 (else 400), JSON as RFC 8259
has it — no ``NaN`` or ``Infinity`` (else 400) — and nested at most :data:`MAX_DEPTH` arrays
and objects deep (else 400). The depth is measured on the text before it is parsed, so no
body reaches the parser's recursion: a body 100,000 brackets deep is a 400, not a
RecursionError and a 500. Pulsar's admin API (Jackson) answers 400 to all of these too.

Then the value is checked against the shape the call expects with the typed readers below
(:func:`obj`, :func:`integer`, :func:`boolean`, :func:`text`, :func:`strings`, :func:`choice`):
each refuses anything else with InvalidRequestError (400) naming the field, what it must be
and what came. Every number has both bounds; where Pulsar has a Java ``int`` or ``long`` the
upper bound is that type's, so what Pulsar accepts is accepted. Handlers read and check the
whole body before they act, so a refused call changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from magnetar.broker.errors import InvalidRequestError

MAX_BODY_BYTES = 1024 * 1024  # aiohttp's own default; Pulsar's bodies are small JSON
MAX_DEPTH = 32  # arrays/objects inside each other; Pulsar's deepest body nests 3
JAVA_INT = 2**31 - 1  # Pulsar's int fields (minutes, seconds, counts)
JAVA_LONG = 2**63 - 1  # Pulsar's long fields (bytes, milliseconds, ids)


class MalformedBodyError(InvalidRequestError):
    """The body is not UTF-8 JSON within the depth bound (400); nothing was changed."""

    code = "http.malformed_body"


class BodyTooLargeError(InvalidRequestError):
    """The body is larger than MAX_BODY_BYTES (413); nothing was read past the bound."""

    code = "http.body_too_large"
    http_status = 413


# a JSON string (escapes included), so brackets inside strings are not counted as nesting
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (0 for a scalar); linear time,
    no recursion, whatever the input."""
    deepest = level = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        level += 1 if bracket in "[{" else -1
        deepest = max(deepest, level)
    return deepest


def _no_constant(name: str) -> Any:
    raise MalformedBodyError(f"malformed JSON body: {name} is not a JSON number")


def parse(raw: bytes) -> Any:
    """The JSON value of ``raw``; MalformedBodyError (400) saying what is wrong."""
    if len(raw) > MAX_BODY_BYTES:
        raise BodyTooLargeError(
            f"request body of {len(raw)} bytes: the limit is {MAX_BODY_BYTES} bytes"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedBodyError(
            f"request body is not UTF-8: byte {raw[e.start]:#04x} at offset {e.start}"
        ) from None
    nesting = depth(text)
    if nesting > MAX_DEPTH:
        raise MalformedBodyError(
            f"malformed JSON body: arrays/objects nest {nesting} deep, the limit is {MAX_DEPTH}"
        )
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as e:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise MalformedBodyError(f"malformed JSON body: {e}") from None


_REQUIRED: Any = object()


async def json_body(request: web.Request, *, default: Any = _REQUIRED) -> Any:
    """The request's JSON body, bounded as the module says. With no body (empty, or
    whitespace only): ``default`` if given, else a 400 saying the call needs one. A JSON
    ``null`` is a body: it is returned, for the caller's shape check to refuse."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise BodyTooLargeError(
            f"request body of {request.content_length} bytes: the limit is {MAX_BODY_BYTES} bytes"
        )
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:  # chunked, no Content-Length: cut at the bound
        raise BodyTooLargeError(
            f"request body over {MAX_BODY_BYTES} bytes: the limit is {MAX_BODY_BYTES} bytes"
        ) from None
    if not raw.strip():
        if default is _REQUIRED:
            raise MalformedBodyError("this call needs a JSON body")
        return default
    return parse(raw)


# -- typed readers: each returns the value checked, or raises InvalidRequestError (400) ----------


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{what} must be a JSON object, got {_shown(value)}")
    return value


def integer(value: Any, what: str, *, minimum: int, maximum: int, hint: str = "") -> int:
    """An integer in ``minimum..maximum`` (JSON true/false and 1.0 are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidRequestError(
            f"{what} must be an integer >= {minimum} and <= {maximum}{hint}, got {_shown(value)}"
        )
    return value


def boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{what} must be true or false, got {_shown(value)}")
    return value


def text(value: Any, what: str, *, max_chars: int = 64 * 1024) -> str:
    if not isinstance(value, str) or len(value) > max_chars:
        raise InvalidRequestError(f"{what} must be text of at most {max_chars} characters")
    return value


def strings(value: Any, what: str, *, max_items: int = 1000) -> list[str]:
    if (
        not isinstance(value, list)
        or len(value) > max_items
        or not all(isinstance(x, str) and len(x) <= 1024 for x in value)
    ):
        raise InvalidRequestError(
            f"{what} must be a list of at most {max_items} strings, got {_shown(value)}"
        )
    return value


def choice(value: Any, what: str, options: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in options:
        raise InvalidRequestError(
            f"unknown {what} {_shown(value)}: use one of {', '.join(options)}"
        )
    return value
