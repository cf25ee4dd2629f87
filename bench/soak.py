"""Soak benchmark (issue 21): does a long-running server stay flat?

``--minutes`` (10) of mixed traffic against one ``magnetar standalone`` it starts itself on
free ports, fsync always:

- **Pulsar**: a batching pulsar-client producer sends ``--rate`` msgs/s over four topics,
  every acknowledgement timed; a Shared consumer per topic acks everything; a **slow**
  consumer (its own subscription on one topic, a receive queue of 10, 20 msgs/s) falls
  further and further behind, so its reads leave the tail cache for the segment files.
- **Kafka**: a confluent-kafka producer (``acks=all``) sends ``--rate`` msgs/s over two
  topics, every delivery timed; a consumer group reads both; a **slow** group (20 msgs/s)
  falls behind.
- **Topic churn**: every ``--churn-s`` seconds a Pulsar topic is created (a producer and a
  consumer on it, 50 messages through), then deleted over REST; and a Kafka topic is
  created and deleted through the admin client.

Every 10 s the server's RSS and open descriptors (``/proc/PID``) and the p99 publish latency
of the last 10 s are sampled. *start* is the mean of the first minute after the
``--warmup-minutes`` (1), *end* the mean of the last minute; the goal is RSS and descriptors
within ±10 % of start. The tail cache is given ``--tail-cache-mib`` (16 MiB) so that it is
full before the warm-up ends: growth after that is not the cache filling to its budget.

Run: ``PYTHONPATH=. .venv/bin/python bench/soak.py [--minutes 10]``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import os
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pulsar

from bench.common import (
    RESULTS_DIR,
    machine_info,
    make_workdir,
    percentile,
    render_table,
    utc_now,
    write_json,
)
from magnetar.testing.server import StandaloneProcess

SAMPLE_S = 10.0
GOAL_PCT = 10.0
PAYLOAD = b"s" * 200
SLOW_RATE = 20.0  # msgs/s a slow consumer takes


@dataclass
class Sample:
    at_s: float  # since the start of the traffic
    rss_mib: float
    fds: int
    pulsar_p99_ms: float
    kafka_p99_ms: float


@dataclass
class Traffic:
    """What the client threads count; every list/int is touched under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pulsar_lat: list[float] = field(default_factory=list)  # seconds, since the last sample
    kafka_lat: list[float] = field(default_factory=list)
    published: int = 0
    produced: int = 0
    received: int = 0
    slow_received: int = 0
    churned: int = 0
    errors: list[str] = field(default_factory=list)

    def error(self, text: str) -> None:
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(text)

    def take_latencies(self) -> tuple[list[float], list[float]]:
        with self.lock:
            out = (self.pulsar_lat, self.kafka_lat)
            self.pulsar_lat, self.kafka_lat = [], []
        return out


def server_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def server_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def paced(stop: threading.Event, rate: float, send: Callable[[int], None]) -> None:
    """Call ``send(n)`` ``rate`` times a second until ``stop``, in 10 ms ticks."""
    started, n = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while n < due:
            send(n)
            n += 1
        stop.wait(0.01)


def pulsar_traffic(
    url: str, topics: list[str], rate: float, t: Traffic, stop: threading.Event
) -> tuple[pulsar.Client, list[threading.Thread]]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producers = [
        client.create_producer(
            topic, batching_max_publish_delay_ms=5, block_if_queue_full=True, send_timeout_millis=0
        )
        for topic in topics
    ]

    def acked(sent: float) -> Callable[[Any, Any], None]:
        def done(result: Any, _mid: Any) -> None:
            with t.lock:
                if result == pulsar.Result.Ok:
                    t.pulsar_lat.append(time.monotonic() - sent)
                    t.published += 1
            if result != pulsar.Result.Ok:
                t.error(f"pulsar publish: {result}")

        return done

    def send(n: int) -> None:
        producers[n % len(producers)].send_async(PAYLOAD, acked(time.monotonic()))

    def consume(topic: str) -> None:
        consumer = client.subscribe(topic, "fast", consumer_type=pulsar.ConsumerType.Shared)
        while not stop.is_set():
            with contextlib.suppress(pulsar.Timeout):
                consumer.acknowledge(consumer.receive(500))
                with t.lock:
                    t.received += 1
        consumer.close()

    def slow() -> None:
        consumer = client.subscribe(topics[0], "slow", receiver_queue_size=10)
        while not stop.wait(1 / SLOW_RATE):
            with contextlib.suppress(pulsar.Timeout):
                consumer.acknowledge(consumer.receive(500))
                with t.lock:
                    t.slow_received += 1
        consumer.close()

    def produce() -> None:
        paced(stop, rate, send)
        for p in producers:
            p.flush()

    threads = [threading.Thread(target=consume, args=(topic,)) for topic in topics]
    threads += [threading.Thread(target=slow), threading.Thread(target=produce)]
    for th in threads:
        th.start()
    return client, threads


def kafka_traffic(
    bootstrap: str, topics: list[str], rate: float, t: Traffic, stop: threading.Event
) -> list[threading.Thread]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    )

    def delivered(sent: float) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                t.error(f"kafka produce: {err}")
                return
            with t.lock:
                t.kafka_lat.append(time.monotonic() - sent)
                t.produced += 1

        return done

    def send(n: int) -> None:
        producer.produce(topics[n % len(topics)], PAYLOAD, on_delivery=delivered(time.monotonic()))
        producer.poll(0)

    def produce() -> None:
        paced(stop, rate, send)
        producer.flush(30)

    def consume(group: str, pause: float) -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "queued.max.messages.kbytes": 1024,
            }
        )
        consumer.subscribe(topics)
        while not stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                t.error(f"kafka consume: {msg.error()}")
                continue
            with t.lock:
                if pause:
                    t.slow_received += 1
                else:
                    t.received += 1
            if pause:
                stop.wait(pause)
        consumer.close()

    threads = [
        threading.Thread(target=produce),
        threading.Thread(target=consume, args=("soak-fast", 0.0)),
        threading.Thread(target=consume, args=("soak-slow", 1 / SLOW_RATE)),
    ]
    for th in threads:
        th.start()
    return threads


def churn(
    server: StandaloneProcess, every: float, t: Traffic, stop: threading.Event
) -> threading.Thread:
    """Create and delete a Pulsar topic and a Kafka topic every ``every`` seconds."""
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})

    def pulsar_round(client: pulsar.Client, n: int) -> None:
        name = f"churn-{n}"
        topic = f"persistent://public/default/{name}"
        consumer = client.subscribe(topic, "churn")
        producer = client.create_producer(topic)
        for _ in range(50):
            producer.send(PAYLOAD)
        for _ in range(50):
            consumer.acknowledge(consumer.receive(10_000))
        producer.close()
        consumer.close()
        url = f"{server.http_url}/admin/v2/persistent/public/default/{name}?force=true"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=30)

    def kafka_round(n: int) -> None:
        name = f"kchurn-{n}"
        for fut in admin.create_topics([confluent_kafka.admin.NewTopic(name, 1)]).values():
            fut.result(30)
        for fut in admin.delete_topics([name]).values():
            fut.result(30)

    def run() -> None:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        n = 0
        while not stop.wait(every):
            try:
                pulsar_round(client, n)
                kafka_round(n)
                with t.lock:
                    t.churned += 1
            except Exception as e:  # counted and shown; the soak goes on
                t.error(f"churn {n}: {type(e).__name__}: {e}")
            n += 1
        client.close()

    th = threading.Thread(target=run)
    th.start()
    return th


def sample(pid: int, at: float, t: Traffic) -> Sample:
    pulsar_lat, kafka_lat = t.take_latencies()
    return Sample(
        at,
        server_rss_mib(pid),
        server_fds(pid),
        percentile(pulsar_lat, 99) * 1000,
        percentile(kafka_lat, 99) * 1000,
    )


def window(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    inside = [s for s in samples if start <= s.at_s < end] or samples[-1:]

    def mean(values: list[float]) -> float:
        ok = [v for v in values if v == v]
        return statistics.fmean(ok) if ok else float("nan")

    return {
        "rss_mib": mean([s.rss_mib for s in inside]),
        "fds": mean([float(s.fds) for s in inside]),
        "pulsar_p99_ms": mean([s.pulsar_p99_ms for s in inside]),
        "kafka_p99_ms": mean([s.kafka_p99_ms for s in inside]),
    }


def soak(server: StandaloneProcess, args: argparse.Namespace, t: Traffic) -> list[Sample]:
    assert server.proc is not None
    pid = server.proc.pid
    stop = threading.Event()
    pulsar_topics = [f"persistent://public/default/soak-{i}" for i in range(4)]
    kafka_topics = ["ksoak-0", "ksoak-1"]
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics(
        [confluent_kafka.admin.NewTopic(k, 2) for k in kafka_topics]
    ).values():
        fut.result(30)
    client, threads = pulsar_traffic(server.pulsar_url, pulsar_topics, args.rate, t, stop)
    threads += kafka_traffic(bootstrap, kafka_topics, args.rate, t, stop)
    threads.append(churn(server, args.churn_s, t, stop))
    started = time.monotonic()
    samples: list[Sample] = []
    try:
        while (elapsed := time.monotonic() - started) < args.minutes * 60:
            time.sleep(max(0.0, (len(samples) + 1) * SAMPLE_S - elapsed))
            s = sample(pid, time.monotonic() - started, t)
            samples.append(s)
            with t.lock:
                counts = (t.published, t.produced, t.received, t.slow_received, t.churned)
            print(
                f"{s.at_s:6.0f} s  rss {s.rss_mib:7.1f} MiB  fds {s.fds:4d}  "
                f"p99 pulsar {s.pulsar_p99_ms:7.2f} ms kafka {s.kafka_p99_ms:7.2f} ms  "
                "published %d produced %d received %d slow %d churned %d" % counts,
                flush=True,
            )
    finally:
        stop.set()
        for th in threads:
            th.join(60)
        client.close()
    return samples


def report_rows(start: dict[str, float], end: dict[str, float]) -> list[list[str]]:
    rows = []
    for key, label, goal in (
        ("rss_mib", "server RSS MiB", True),
        ("fds", "server open fds", True),
        ("pulsar_p99_ms", "publish p99 ms (pulsar-client)", False),
        ("kafka_p99_ms", "produce p99 ms (confluent-kafka)", False),
    ):
        a, b = start[key], end[key]
        change = (b - a) / a * 100 if a else float("nan")
        verdict = ("met" if abs(change) <= GOAL_PCT else "NOT MET") if goal else ""
        rows.append([label, f"{a:.1f}", f"{b:.1f}", f"{change:+.1f} %", verdict])
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--minutes", type=float, default=10, help="length of the soak")
    p.add_argument("--warmup-minutes", type=float, default=1, help="start is sampled after it")
    p.add_argument("--rate", type=float, default=1000, help="msgs/s of each protocol")
    p.add_argument("--churn-s", type=float, default=2, help="a topic created+deleted every S")
    p.add_argument("--tail-cache-mib", type=int, default=16)
    p.add_argument("--dir", type=Path, help="where data goes (default: the temp dir if on disk)")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "soak.json")
    args = p.parse_args(argv)
    if args.minutes < args.warmup_minutes + 2:
        p.error("--minutes must leave two minutes after the warm-up (start and end windows)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = utc_now()
    workdir, fs = make_workdir(args.dir, prefix="magnetar-soak-bench-")
    print(f"{started}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})")
    traffic = Traffic()
    extra = ["--fsync", "always", "--tail-cache-bytes", str(args.tail_cache_mib << 20)]
    try:
        with StandaloneProcess(workdir / "data", extra_args=extra) as server:
            samples = soak(server, args, traffic)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    warm = args.warmup_minutes * 60
    total = args.minutes * 60
    start = window(samples, warm, warm + 60)
    end = window(samples, total - 60, total + SAMPLE_S)
    print(f"\nstart: minute after a {args.warmup_minutes:g}-minute warm-up; end: last minute")
    headers = ["measure", "start", "end", "change", "goal ±10 %"]
    print(render_table(headers, report_rows(start, end)))
    print(
        f"published {traffic.published:,} (pulsar) + produced {traffic.produced:,} (kafka); "
        f"received {traffic.received:,} fast + {traffic.slow_received:,} slow; "
        f"{traffic.churned} churn rounds; load average {os.getloadavg()[0]:.1f}"
    )
    for e in traffic.errors:
        print("error:", e)
    report = {
        "benchmark": "soak",
        "started": started,
        "command": " ".join(["bench/soak.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "filesystem": dataclasses.asdict(fs),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "clients": {p: importlib.metadata.version(p) for p in ("pulsar-client", "confluent-kafka")},
        "start": start,
        "end": end,
        "samples": [dataclasses.asdict(s) for s in samples],
        "counts": {
            k: getattr(traffic, k)
            for k in ("published", "produced", "received", "slow_received", "churned")
        },
        "errors": traffic.errors,
        "load_average": os.getloadavg(),
    }
    write_json(args.json, report)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
