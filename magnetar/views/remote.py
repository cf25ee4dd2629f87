"""Reading a view's definition from a running Magnetar over HTTP (for :func:`as_of`)."""

from __future__ import annotations

from magnetar.spark.options import SparkSourceError
from magnetar.spark.planning import http_get
from magnetar.views.errors import ViewNotFoundError
from magnetar.views.model import ViewDefinition


def definition_of(url: str, name: str) -> ViewDefinition:
    try:
        status = http_get(f"{url.rstrip('/')}/views/{name}")
    except SparkSourceError as e:
        raise ViewNotFoundError(f"cannot read view {name!r} from {url}: {e}") from None
    return ViewDefinition.parse(name, status["definition"])
