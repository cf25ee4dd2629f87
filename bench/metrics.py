"""What ``/metrics`` costs: a scrape with N topics, and publishing with metrics on vs off.

* **scrape** — a real standalone with N loaded topics (one subscription each), scraped
  ``--scrapes`` times back to back: wall time per scrape as Prometheus sees it, the server's
  CPU per scrape, the size of the answer and its series, with per-topic series
  (``expose_topic_level_metrics=true``) and summed per namespace (``false``).
* **publish** — pulsar-client publishing 100-byte messages, batched (the client is the
  limit, FACTS.md) and unbatched (one entry per message: every entry pays the publish
  latency histogram and the counters): *off* is the commit before metrics existed
  (``--baseline-ref``, default ``afd7094^``, run from a ``git archive`` of it), *on* is this
  tree not scraped, *on+scraped* this tree scraped once a second meanwhile (Prometheus
  scrapes every 15 s by default: a harsher load). Rounds alternate; medians are reported.
* **record** — the recording itself in-process: one ``Histogram.observe`` and one
  ``TopicCounters.published`` (what each stored entry pays), ns per call.

Run: ``PYTHONPATH=. .venv/bin/python bench/metrics.py [--topics 10,100,1000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar

from bench.common import (
    RESULTS_DIR,
    fmt_rate,
    machine_info,
    percentile,
    process_cpu_seconds,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.broker.counters import TopicCounters
from magnetar.core.metrics import Histogram
from magnetar.testing.server import REPO, StandaloneProcess

PAYLOAD = b"m" * 100


@dataclass
class SourceProcess(StandaloneProcess):
    """A standalone run from another source tree (the baseline commit)."""

    source: Path | None = None

    def command(self) -> list[str]:
        cmd = super().command()
        if self.source is None:
            return cmd
        boot = (
            f"import sys; sys.path.insert(0, {str(self.source)!r}); "
            "from magnetar.cli import main; sys.exit(main())"
        )
        return [cmd[0], "-c", boot, *cmd[3:]]


def http(server: StandaloneProcess, method: str, path: str) -> bytes:
    request = urllib.request.Request(server.http_url + path, method=method, data=b"")
    with urllib.request.urlopen(request, timeout=60) as response:
        body: bytes = response.read()
        return body


# -- scrape cost --------------------------------------------------------------------------


def scrape_costs(args: argparse.Namespace, workdir: Path) -> list[list[Any]]:
    rows = []
    for topic_level in ("true", "false"):
        extra = ["--expose-topic-level-metrics", topic_level]
        with StandaloneProcess(workdir / f"scrape-{topic_level}", extra_args=extra) as server:
            pid = server.proc.pid  # type: ignore[union-attr]
            made = 0
            for n in args.topics:
                for i in range(made, n):
                    http(server, "PUT", f"/admin/v2/persistent/public/default/t{i}")
                    http(server, "PUT", f"/admin/v2/persistent/public/default/t{i}/subscription/s")
                made = n
                rows.append([n, topic_level, *_scrape(server, pid, args.scrapes)])
                print(render_table(SCRAPE_HEADERS, [rows[-1]]).splitlines()[-1], flush=True)
    return rows


SCRAPE_HEADERS = ["topics", "per topic", "p50 ms", "p99 ms", "server CPU ms", "KB", "series"]


def _scrape(server: StandaloneProcess, pid: int, times: int) -> list[str]:
    http(server, "GET", "/metrics")  # warm: the first scrape starts the rate windows
    walls, body = [], b""
    cpu = process_cpu_seconds(pid)
    for _ in range(times):
        started = time.perf_counter()
        body = http(server, "GET", "/metrics")
        walls.append(time.perf_counter() - started)
    cpu = (process_cpu_seconds(pid) - cpu) / times
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    return [
        f"{percentile(walls, 50) * 1000:.1f}",
        f"{percentile(walls, 99) * 1000:.1f}",
        f"{cpu * 1000:.1f}",
        f"{len(body) / 1000:.0f}",
        f"{series:,}",
    ]


# -- publish with metrics on and off ------------------------------------------------------


def publish(server: StandaloneProcess, batched: bool, messages: int) -> tuple[float, float]:
    """(messages/s, server CPU µs per message) of one producer publishing ``messages``."""
    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            f"persistent://public/default/p-{time.monotonic_ns()}",
            batching_enabled=batched,
            batching_max_messages=1000,
            max_pending_messages=5000,
            block_if_queue_full=True,
        )
        for _ in range(min(5000, messages // 10)):  # warm up: topic loaded, JIT-free paths hot
            producer.send_async(PAYLOAD, None)
        producer.flush()
        pid = server.proc.pid  # type: ignore[union-attr]
        cpu, started = process_cpu_seconds(pid), time.perf_counter()
        for _ in range(messages):
            producer.send_async(PAYLOAD, None)
        producer.flush()
        seconds = time.perf_counter() - started
        cpu = process_cpu_seconds(pid) - cpu
        producer.close()
    finally:
        client.close()
    return messages / seconds, cpu / messages * 1e6


@contextmanager
def scraped_every(server: StandaloneProcess, interval: float) -> Iterator[None]:
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            http(server, "GET", "/metrics")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def baseline_tree(ref: str, workdir: Path) -> Path:
    target = workdir / "baseline"
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "magnetar"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def publish_runs(args: argparse.Namespace, workdir: Path) -> list[list[Any]]:
    baseline = baseline_tree(args.baseline_ref, workdir)
    conditions: list[tuple[str, Path | None, bool]] = [
        ("off (before metrics)", baseline, False),
        ("on", None, False),
        ("on+scraped 1/s", None, True),
    ]
    results: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for name, source, scraped in conditions:
            data = workdir / f"publish-{r}-{name.split()[0]}"
            with SourceProcess(data, source=source) as server:
                for batched in (True, False):
                    n = args.messages if batched else args.messages // 10
                    if scraped:
                        with scraped_every(server, 1.0):
                            got = publish(server, batched, n)
                    else:
                        got = publish(server, batched, n)
                    results.setdefault((name, batched), []).append(got)
                    print(
                        f"round {r + 1} {name} batched={batched}: {got[0]:,.0f} msg/s", flush=True
                    )
    rows = []
    for batched in (True, False):
        for name, _, _ in conditions:
            runs = results[(name, batched)]
            rate = statistics.median(x[0] for x in runs)
            cpu = statistics.median(x[1] for x in runs)
            spread = f"{min(x[0] for x in runs):,.0f}–{max(x[0] for x in runs):,.0f}"
            kind = "batched" if batched else "unbatched"
            rows.append([kind, name, fmt_rate(rate), spread, f"{cpu:.1f}"])
    return rows


PUBLISH_HEADERS = ["workload", "metrics", "msgs/s (median)", "range", "server CPU µs/msg"]


# -- the recording itself ----------------------------------------------------------------


def record_costs() -> list[list[Any]]:
    h, counters = Histogram(), TopicCounters()
    cases: list[tuple[str, Callable[[], None]]] = [
        ("Histogram.observe", lambda: h.observe(0.0004)),
        ("TopicCounters.published", lambda: counters.published(1, 100, 0.0004)),
        ("an empty call (timeit's own cost)", lambda: None),
    ]
    rows = []
    for name, fn in cases:
        n = 1_000_000
        best = min(timeit.repeat(fn, number=n, repeat=5)) / n
        rows.append([name, f"{best * 1e9:.0f}"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="10,100,1000")
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-ref", default="afd7094^")
    args = parser.parse_args()
    args.topics = [int(x) for x in args.topics.split(",")]
    print(f"bench/metrics.py {utc_now()} load {os.getloadavg()[0]:.1f} {machine_info()}")
    with tempfile.TemporaryDirectory(prefix="tmp-metrics-", dir=REPO / "bench") as tmp:
        workdir = Path(tmp)
        record = record_costs()
        print(render_table(["call", "ns"], record), flush=True)
        scrape = scrape_costs(args, workdir)
        published = publish_runs(args, workdir)
    print()
    for headers, rows in (
        (["call", "ns"], record),
        (SCRAPE_HEADERS, scrape),
        (PUBLISH_HEADERS, published),
    ):
        print(render_table(headers, rows) + "\n")
        print(render_markdown_table(headers, rows) + "\n")
    write_json(
        RESULTS_DIR / f"metrics-{utc_now()}.json",
        {
            "machine": machine_info(),
            "args": {k: v for k, v in vars(args).items()},
            "record": record,
            "scrape": scrape,
            "publish": published,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
