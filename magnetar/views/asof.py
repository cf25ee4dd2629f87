"""As-of views ("virtual state", seed 000): a view's state at a past point, rebuilt by a
bounded batch read of the same topics through the same transformation.

The point is a publish time (``timestamp``: events published before it, in ms) or explicit
end offsets (``{"topic": {"0": 1234}}``, exclusive). Nothing here writes: callers store or
return the result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from magnetar.views.errors import InvalidViewError
from magnetar.views.model import LABEL, ViewDefinition
from magnetar.views.session import bind_view_sql, source_reader
from magnetar.views.transform import events_of, fold, load_function


def point_options(timestamp: int | None, offsets: Any) -> dict[str, str]:
    """Source options for the point; InvalidViewError unless exactly one is given."""
    if (timestamp is None) == (offsets is None):
        raise InvalidViewError('give exactly one of "timestamp" (ms) or "offsets"')
    if timestamp is not None:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0:
            raise InvalidViewError(f'"timestamp" must be epoch milliseconds, got {timestamp!r}')
        return {"endingTimestamp": str(timestamp)}
    if not isinstance(offsets, dict) or not all(isinstance(v, dict) for v in offsets.values()):
        raise InvalidViewError('"offsets" must look like {"topic": {"0": 1234}}')
    return {"endingOffsets": json.dumps(offsets, sort_keys=True)}


def default_label(timestamp: int | None, offsets: Any) -> str:
    if timestamp is not None:
        return f"t{timestamp}"
    digest = hashlib.sha1(json.dumps(offsets, sort_keys=True).encode()).hexdigest()
    return f"o{digest[:12]}"


def check_label(label: str) -> str:
    if not LABEL.fullmatch(label):
        raise InvalidViewError(f"bad label {label!r}: letters, digits and _ (at most 32)")
    return label


def frame_at(spark: Any, definition: ViewDefinition, url: str, point: dict[str, str]) -> Any:
    """The view's state at ``point`` as a Spark DataFrame, in the caller's own process (a
    Python view's module is imported from its ``sys.path``)."""
    if definition.sql is not None:
        reader = source_reader(spark, url, definition.source, streaming=False)
        return bind_view_sql(spark, reader.options(**point), definition.sql)[0]
    rows = rows_at(spark, definition, url, point, roots=None)
    if not rows:
        return spark.createDataFrame([], schema=", ".join(f"`{k}` string" for k in definition.key))
    return spark.createDataFrame(rows)


def rows_at(
    spark: Any,
    definition: ViewDefinition,
    url: str,
    point: dict[str, str],
    *,
    roots: Sequence[Path] | None,
    token: str | None = None,
) -> list[dict[str, Any]]:
    """The view's rows at ``point`` (SQL: the query's result; Python: a fold from empty,
    its module imported from ``roots``, see :func:`~magnetar.views.transform.load_function`)."""
    reader = source_reader(spark, url, definition.source, streaming=False, token=token)
    reader = reader.options(**point)
    if definition.sql is not None:
        frame = bind_view_sql(spark, reader, definition.sql)[0]
        return list(frame.toArrow().to_pylist())
    events = reader.load()
    assert definition.python is not None
    apply = load_function(definition.python, roots=roots)
    result = fold(events_of(events.toArrow()), definition.key, apply, lambda keys: {})
    return list(result.upserts.values())
