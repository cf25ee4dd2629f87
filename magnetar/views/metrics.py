"""The views' series of ``/metrics``: state, lag and bootstrap progress of every view.

``magnetar_view_state`` follows the Prometheus state-set habit: one series per state, 1 for
the one the view is in. A view building a new version reports both versions (label
``version``); lag is the served version's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from magnetar.views.errors import ViewError
from magnetar.views.model import ViewState
from magnetar.views.service import ViewService

_LABELS = ["cluster", "view", "version"]


def view_metrics(service: ViewService, cluster: str) -> Callable[[], Awaitable[list[Metric]]]:
    """A metrics source (see ``magnetar.http.metrics``) for the views of ``service``."""

    async def collect() -> list[Metric]:
        state = GaugeMetricFamily(
            "magnetar_view_state", "1 for the state the view is in", labels=[*_LABELS, "state"]
        )
        progress = GaugeMetricFamily(
            "magnetar_view_bootstrap_progress",
            "Share of the history at creation applied (1 once LIVE)",
            labels=_LABELS,
        )
        lag_events = GaugeMetricFamily(
            "magnetar_view_lag_events", "Events in the sources not yet applied", labels=_LABELS
        )
        lag_seconds = GaugeMetricFamily(
            "magnetar_view_lag_seconds",
            "Seconds since the view last committed, while it is behind (0 when caught up)",
            labels=_LABELS,
        )
        unparsed = CounterMetricFamily(
            "magnetar_view_unparsed_messages",
            "Messages applied whose value did not parse as the topic's JSON schema",
            labels=_LABELS,
        )
        for name in await service.names():
            try:
                status = await service.status(name)
            except ViewError:  # deleted while this scrape ran
                continue
            for version in _versions(status):
                labels = [cluster, name, str(version.get("version"))]
                for s in ViewState:
                    state.add_metric([*labels, s.value], float(version["state"] == s.value))
                progress.add_metric(labels, float(version.get("progress", 1.0)))
                lag = version.get("lag") or {}
                lag_events.add_metric(labels, float(lag.get("messages", 0)))
                lag_seconds.add_metric(labels, lag.get("ms", 0) / 1000)
                unparsed.add_metric(labels, float(version.get("unparsed", 0)))
        return [state, progress, lag_events, lag_seconds, unparsed]

    return collect


def _versions(status: dict[str, Any]) -> list[dict[str, Any]]:
    pending = status.get("pending")
    return [status, pending] if pending else [status]
