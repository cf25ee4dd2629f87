"""Tier 8: event-sourced materialized views (seed 000's StreamSQL story).

A view maps the events of one or more topics to keyed state with a transformation — a Spark
SQL query over the table ``events``, or a Python fold ``apply(state, event) -> state`` — and
serves that state from a state store (SQLite by default, PostgreSQL, Redis). A new view
backfills over all history in order, then stays live, each event applied exactly once; any
view can be rebuilt as of a past point. ``import magnetar.views`` does not import pyspark.
"""

from __future__ import annotations

from typing import Any

from magnetar.views.errors import (
    InvalidViewError,
    StateStoreError,
    TransformError,
    ViewConflictError,
    ViewError,
    ViewNotFoundError,
)
from magnetar.views.model import ViewDefinition, ViewState

__all__ = [
    "InvalidViewError",
    "StateStoreError",
    "TransformError",
    "ViewConflictError",
    "ViewDefinition",
    "ViewError",
    "ViewNotFoundError",
    "ViewState",
    "as_of",
]


def as_of(
    spark: Any,
    name: str,
    *,
    timestamp: int | None = None,
    offsets: dict[str, dict[str, int]] | None = None,
    url: str = "http://localhost:8080",
) -> Any:
    """The view ``name`` (defined on the Magnetar at ``url``) as of a past point, computed in
    ``spark`` through the same transformation: a DataFrame. Writes nothing anywhere."""
    from magnetar.views import asof
    from magnetar.views.remote import definition_of

    definition = definition_of(url, name)
    return asof.frame_at(spark, definition, url, asof.point_options(timestamp, offsets))
