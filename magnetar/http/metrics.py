"""``GET /metrics``: the node's metrics in the Prometheus text format.

Nothing is counted for Prometheus on the hot paths: a scrape reads the counters and stats the
broker, storage engine, protocol servers and views keep anyway (Pulsar's custom-collector
way), and the few latency histograms they record cheaply (:mod:`magnetar.core.metrics`).
Each part of the node contributes a *source*: an async callable returning metric families;
the standalone adds the sources of the tiers above this one (Kafka, views).

Read-only, and never blocks a write: a scrape costs about what a ``stats`` call per topic does
(``bench/metrics.py`` measures it).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from magnetar.core.metrics import Histogram
from magnetar.http.routes import Route

MetricSource = Callable[[], Awaitable[Iterable[Metric]]]


class StorageCounters(Protocol):
    """What :func:`storage_metrics` reads of the node's storage engine, structurally: http
    sits above the broker and does not import storage (tests/test_tiers.py)."""

    @property
    def stats(self) -> Any: ...  # journal, cache and recovery counters

    @property
    def cache_budget(self) -> Any: ...  # the tail cache's bytes, entries and evictions

    @property
    def files(self) -> Any: ...  # open segment files (``open_count``)

    def partitions(self) -> Any: ...

    def damaged_segments(self) -> int: ...


class Rates:
    """Per-second rates of counters over about the last ``window`` seconds of scrapes
    (Pulsar reports rates over its stats interval; Prometheus users mostly take ``rate()``
    of the ``_total`` counters instead). The first scrape of a series answers 0."""

    def __init__(self, window: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.window = window
        self.clock = clock
        self._samples: dict[Any, deque[tuple[float, tuple[int, ...]]]] = {}
        self._seen: set[Any] = set()

    def rate(self, key: Any, values: tuple[int, ...]) -> tuple[float, ...]:
        now = self.clock()
        samples = self._samples.setdefault(key, deque())
        self._seen.add(key)
        if not samples or now - samples[-1][0] >= 1.0:  # at most one sample a second
            samples.append((now, values))
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()
        then, before = samples[0]
        span = now - then
        if span <= 0:
            return tuple(0.0 for _ in values)
        return tuple(max(0.0, (v - b) / span) for v, b in zip(values, before, strict=True))

    def forget_unseen(self) -> None:
        """Drop the series not asked for since the last call (deleted topics)."""
        for key in set(self._samples) - self._seen:
            del self._samples[key]
        self._seen.clear()


def counter(name: str, text: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, labels=labels)


def gauge(name: str, text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, labels=labels)


def histogram(name: str, text: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, text, labels=labels)


def add_histogram(family: HistogramMetricFamily, labels: list[str], h: Histogram) -> None:
    buckets, total = h.cumulative()
    family.add_metric(labels, buckets, total)


class _Gathered:
    """The collector a scrape's registry renders: what the sources answered for it."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


class MetricsEndpoint:
    """Renders every source's families, plus the process's own (CPU, memory, GC)."""

    def __init__(self, sources: list[MetricSource]) -> None:
        self.sources = sources

    async def render(self) -> bytes:
        """Values are read on the event loop (a consistent moment of the node); the text is
        written on a worker thread, as it costs ~10 µs a series (half a second for 1,000
        topics with per-topic series) and the loop must go on serving meanwhile."""
        families: list[Metric] = []
        for source in self.sources:
            families += await source()
        registry = CollectorRegistry(auto_describe=False)  # one per scrape: scrapes overlap
        registry.register(_Gathered(families))
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(standard)
        return await asyncio.to_thread(generate_latest, registry)

    def route(self) -> Route:
        async def metrics(_request: web.Request) -> web.Response:
            body = await self.render()
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

        return Route("GET", "/metrics", metrics, "Metrics in the Prometheus text format")


def storage_metrics(engine: StorageCounters, cluster: str) -> MetricSource:
    """The storage engine's journal, tail cache and segments (node-wide series)."""

    async def collect() -> list[Metric]:
        s, cache = engine.stats, engine.cache_budget
        labels = ["cluster"]
        out: list[Metric] = []
        for name, text, value in (
            ("magnetar_journal_fsyncs", "Journal fsyncs", s.fsyncs),
            ("magnetar_journal_group_commits", "Group commits (one journal write each)", s.flushes),
            ("magnetar_journal_entries", "Entries journalled", s.entries),
            ("magnetar_journal_bytes", "Bytes journalled", s.bytes),
            ("magnetar_segment_rolls", "Segments closed and a new one opened", s.rolls),
            ("magnetar_tail_cache_hits", "Reads served from the tail cache", s.cache_hits),
            ("magnetar_tail_cache_misses", "Reads of stored entries from files", s.cache_misses),
            ("magnetar_tail_cache_evictions", "Entries evicted from the cache", cache.evictions),
            (
                "magnetar_storage_disk_full_episodes",
                "Times appends started failing for want of disk",
                s.disk_full_episodes,
            ),
        ):
            total = counter(name, text, labels)
            total.add_metric([cluster], value)
            out.append(total)
        reads = s.cache_hits + s.cache_misses
        for name, text, v in (
            (
                "magnetar_tail_cache_hit_ratio",
                "Share of reads the tail cache served since start (1 before any read)",
                s.cache_hits / reads if reads else 1.0,
            ),
            ("magnetar_tail_cache_bytes", "Bytes held in the tail cache", cache.bytes),
            ("magnetar_tail_cache_max_bytes", "The tail cache's budget", cache.max_bytes),
            ("magnetar_tail_cache_entries", "Entries held in the tail cache", cache.entries),
            ("magnetar_storage_disk_full", "1 while appends fail for want of disk", s.disk_full),
            ("magnetar_storage_partitions", "Partitions stored", len(engine.partitions())),
            (
                "magnetar_storage_damaged_segments",
                "Segments a read or check found damaged (admin topics check names them)",
                engine.damaged_segments(),
            ),
            ("magnetar_storage_open_segment_files", "Segment files open", engine.files.open_count),
            (
                "magnetar_storage_recovery_cut_bytes",
                "Bytes of torn tails cut at the last start (journal and segments)",
                s.recovery_cut_bytes,
            ),
            (
                "magnetar_storage_recovery_cut_records",
                "Torn tails cut at the last start; a journal one may be a power-damaged ack",
                s.recovery_cut_records,
            ),
        ):
            level = gauge(name, text, labels)
            level.add_metric([cluster], float(v))
            out.append(level)
        fsync = histogram(
            "magnetar_journal_fsync_latency_seconds", "Seconds per journal fsync", labels
        )
        add_histogram(fsync, [cluster], s.fsync_latency)
        group = histogram(
            "magnetar_journal_group_commit_entries", "Entries per group commit", labels
        )
        add_histogram(group, [cluster], s.group_commit_entries)
        return [*out, fsync, group]

    return collect
