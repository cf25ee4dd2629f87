"""Python transformations: ``apply(state, event) -> state`` folded per key in offset order.

``state`` is the key's current row (a dict) or None; the function returns the new row, or
None to delete the key. It must be a pure function of its arguments: a replayed or rebuilt
view must reach the same state. Events are dicts of the source's columns, with times as
epoch milliseconds and ``data`` the decoded record (the topic's JSON schema, else the value
parsed as JSON when it is an object, else None).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.views.errors import InvalidViewError, TransformError
from magnetar.views.imports import import_trusted
from magnetar.views.model import key_text

Apply = Callable[[dict[str, Any] | None, dict[str, Any]], dict[str, Any] | None]
TOP_LEVEL = {
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "publishTime",
    "eventTime",
    "properties",
    "producerName",
    "sequenceId",
}


def load_function(spec: str, *, roots: Sequence[Path] | None) -> Apply:
    """Import ``module:function``; InvalidViewError when it cannot be imported or called.

    On a server ``roots`` are the ``views_python_path`` directories: the module must be a
    file under one of them (see :mod:`magnetar.views.imports`), and none refuses every
    Python view. ``None`` imports from ``sys.path``: only for a caller's own process (an
    as-of DataFrame built in a notebook), never for a definition a server received.
    """
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = (
            importlib.import_module(module_name)
            if roots is None
            else import_trusted(module_name, roots)
        )
        for part in attr.split("."):
            target = getattr(target, part)
    except InvalidViewError:
        raise
    except Exception as e:  # an import runs arbitrary code: report whatever it raised
        raise InvalidViewError(
            f"cannot import the transformation {spec!r}: {type(e).__name__}: {e}"
        ) from None
    if not callable(target):
        raise InvalidViewError(f"the transformation {spec!r} is not callable")
    return target


def events_of(table: pa.Table) -> list[dict[str, Any]]:
    """The rows of a source batch as event dicts, in (topic, partition, offset) order."""
    table = table.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    for name in ("publishTime", "eventTime"):
        micros = pc.cast(table.column(name), pa.int64())
        table = table.set_column(table.schema.get_field_index(name), name, pc.divide(micros, 1000))
    events = table.to_pylist()
    has_data = "data" in table.column_names
    for e in events:
        e["properties"] = dict(e["properties"] or [])
        if not has_data:
            e["data"] = _json_object(e["value"])
    return events


def _json_object(value: bytes | None) -> dict[str, Any] | None:
    if not value or value[:1] not in (b"{", b" ", b"\n"):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def key_values(event: Mapping[str, Any], key: Sequence[str]) -> list[Any]:
    """Each key column: a field of ``data`` (or a dotted path ``data.x``), else a column."""
    out = []
    for name in key:
        data = event.get("data")
        if name.startswith("data.") and isinstance(data, dict):
            out.append(data.get(name[5:]))
        elif isinstance(data, dict) and name in data:
            out.append(data[name])
        elif name in TOP_LEVEL:
            out.append(event[name])
        else:
            raise TransformError(
                f"key column {name!r} is neither a field of the event's data nor a column",
                at=position_of(event),
            )
    return out


def position_of(event: Mapping[str, Any]) -> dict[str, Any]:
    return {"topic": event["topic"], "partition": event["partition"], "offset": event["offset"]}


@dataclass
class FoldResult:
    """The changes of one batch: new rows by key and the keys to delete."""

    upserts: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)


def fold(
    events: Iterable[dict[str, Any]],
    key: Sequence[str],
    apply: Apply,
    load: Callable[[list[str]], Mapping[str, dict[str, Any]]],
    name: str = "transformation",
) -> FoldResult:
    """Fold ``events`` (already in order) into per-key state, starting from what ``load``
    returns for the keys seen. Raises TransformError naming the failing event."""
    grouped: dict[str, tuple[list[Any], list[dict[str, Any]]]] = {}
    for event in events:
        values = key_values(event, key)
        grouped.setdefault(key_text(values), (values, []))[1].append(event)
    current = dict(load(list(grouped)))
    result = FoldResult()
    for text, (values, batch) in grouped.items():
        state = current.get(text)
        for event in batch:
            state = _step(apply, state, event, name)
        if state is None:
            if text in current:
                result.deletes.add(text)
        else:
            result.upserts[text] = {**dict(zip(key, values, strict=True)), **state}
    return result


def _step(
    apply: Apply, state: dict[str, Any] | None, event: dict[str, Any], name: str
) -> dict[str, Any] | None:
    try:
        new = apply(None if state is None else dict(state), event)
    except Exception as e:  # user code: any exception fails the view at this event
        at = position_of(event)
        raise TransformError(
            f"{name} raised {type(e).__name__}: {e} at {at['topic']} partition "
            f"{at['partition']} offset {at['offset']}",
            at=at,
        ) from e
    if new is not None and not isinstance(new, dict):
        at = position_of(event)
        raise TransformError(
            f"{name} returned {type(new).__name__}, not a dict or None, at {at['topic']} "
            f"partition {at['partition']} offset {at['offset']}",
            at=at,
        )
    return new
