"""Key lookups of ``GET /views/{name}/rows?col=value``: which filters a view accepts.

A view's store finds rows by key only, so a filter must name key columns — all of them —
with values of the columns' types. Anything else is refused with :class:`InvalidViewError`
(HTTP 400) naming the view's columns: a filter that was silently ignored answered with
*other* keys' rows, which an application taking ``rows[0]`` shows as its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from magnetar.views.errors import InvalidViewError

# Spark's simple type names (a SQL view's result schema) and JSON's (a stored row), by kind.
_INTEGRAL = {"tinyint", "smallint", "int", "bigint", "integer", "long", "short", "byte"}
_FRACTIONAL = {"float", "double", "number", "real"}
_BOOLEAN = {"boolean"}


def column_types_of_row(row: Mapping[str, Any]) -> dict[str, str | None]:
    """Column → JSON type of a stored row (values keep their JSON types in every store)."""
    return {name: _json_type(value) for name, value in row.items()}


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None  # null or nested: the type is not known from this row


def key_filter(
    view: str,
    query: Mapping[str, str],
    key: Sequence[str],
    columns: Mapping[str, str | None],
) -> list[Any] | None:
    """The key values ``query`` asks for (in key order), or None when it filters nothing.

    ``columns`` maps the view's columns to their types where known (key columns always
    appear). Raises InvalidViewError for an unknown column, a non-key column, a partial key
    or a value that does not fit its column's type.
    """
    if not query:
        return None
    known = {**dict.fromkeys(key), **columns}
    described = _describe(view, key, known)
    unknown = [c for c in query if c not in known]
    if unknown:
        raise InvalidViewError(f"unknown column(s) {unknown} in the filter; {described}")
    not_key = [c for c in query if c not in key]
    if not_key:
        raise InvalidViewError(f"column(s) {not_key} are not key columns; {described}")
    if len(query) != len(key):
        missing = [k for k in key if k not in query]
        raise InvalidViewError(f"give every key column or none: {missing} missing; {described}")
    return [_value(view, k, query[k], known.get(k)) for k in key]


def _describe(view: str, key: Sequence[str], columns: Mapping[str, str | None]) -> str:
    typed = ", ".join(f"{c} {t}" if t else c for c, t in columns.items())
    return (
        f"view {view} finds rows by its key {list(key)} "
        f"(?{'&'.join(f'{k}=VALUE' for k in key)}); its columns: {typed}"
    )


def _value(view: str, column: str, text: str, kind: str | None) -> Any:
    """``text`` as a value of ``kind``; untyped columns take JSON numbers/booleans as such."""
    if kind is None:
        return _guess(text)
    kind = kind.lower()
    try:
        if kind in _INTEGRAL:
            return int(text)
        if kind in _FRACTIONAL or kind.startswith("decimal"):
            return float(text)
    except ValueError:
        raise InvalidViewError(
            f"{column}={text!r} does not fit column {column} of view {view}, which is {kind}"
        ) from None
    if kind in _BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise InvalidViewError(
                f"{column}={text!r} does not fit column {column} of view {view}, which is "
                "boolean (true or false)"
            )
        return text.lower() == "true"
    return text  # string, and timestamps/dates, which rows hold as ISO text


def _guess(text: str) -> Any:
    """A JSON number or boolean when ``text`` parses as one, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) else text
