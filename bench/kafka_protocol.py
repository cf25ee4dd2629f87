"""Kafka protocol benchmark: Magnetar through ``confluent-kafka`` (librdkafka), next to the
same work through ``pulsar-client`` on Magnetar's Pulsar port (the same store) and against a
Redis Streams peer, in the same run, on the same disk.

Every write is durable before it is acknowledged: Magnetar runs with ``fsync=always``, Redis
with ``appendonly yes``, ``appendfsync always``. Messages are 100 bytes, one partition (one
stream). Per system:

* **produce** — ``--messages`` messages as fast as the client goes. Kafka: ``acks=all``,
  ``linger.ms=5``; Pulsar: batching producer, ``send_async``; Redis: pipelines of
  ``--pipeline`` XADDs. Latency is send → acknowledgement, timed for one message in
  ``--sample-every`` (a Python callback on every message would measure the GIL, not the
  server); under saturation it is mostly time queued in the client.
* **paced** — ``--paced-rate`` msgs/s for ``--paced-seconds`` through confluent-kafka:
  send → ack latency when the client is not saturated.
* **consume** — the backlog read from the start. Kafka: a consumer group, ``consume()`` in
  batches (``fetch.queue.backoff.ms=0``: librdkafka's default 1 s pause whenever its
  prefetch queue is full would otherwise dominate); Pulsar: ``receive()`` per message, a
  cumulative ack every 1000; Redis: XREAD COUNT ``--pipeline``. A bare Fetch loop
  (kafka.protocol over a socket, batch headers parsed) shows what the server hands out with
  no client library in between.

Goals (the issue's): ≥ 200k msgs/s produced and ≥ 300k msgs/s consumed through Kafka.
The benchmark installs ``redis-server`` with apt-get when it is missing (as root).

Run: ``PYTHONPATH=. .venv/bin/python bench/kafka_protocol.py [--messages N]``
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import pulsar
import redis

from bench.common import (
    RESULTS_DIR,
    fmt_ms,
    fmt_rate,
    machine_info,
    make_workdir,
    percentile,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.wire import consumer as kafka_consumer_api
from magnetar.testing.server import StandaloneProcess, free_port

FetchRequest = kafka_consumer_api.FetchRequest
FetchResponse = kafka_consumer_api.FetchResponse

MESSAGE = b"m" * 100
TOPIC = "bench-kafka"
PULSAR_TOPIC = "persistent://public/default/bench-pulsar"
STREAM = b"bench-stream"
PRODUCE_GOAL, CONSUME_GOAL = 200_000, 300_000


@dataclass
class Result:
    system: str
    produce_rate: float = float("nan")
    consume_rate: float = float("nan")
    latencies: list[float] = field(default_factory=list)
    paced: list[float] = field(default_factory=list)  # latencies at --paced-rate

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def timed(n: int, work: Callable[[], None]) -> float:
    """Messages per second of ``work`` handling ``n`` messages."""
    start = time.perf_counter()
    work()
    return n / (time.perf_counter() - start)


# -- Kafka through confluent-kafka -----------------------------------------------------------


def kafka_produce(bootstrap: str, n: int, every: int, result: Result) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    )
    failed: list[object] = []

    def on_ack(sent_at: float, err: object, _msg: object) -> None:
        result.latencies.append(time.perf_counter() - sent_at)
        if err is not None:
            failed.append(err)

    def work() -> None:
        for i in range(n):
            callback = functools.partial(on_ack, time.perf_counter()) if i % every == 0 else None
            while True:
                try:
                    producer.produce(TOPIC, MESSAGE, on_delivery=callback)
                    break
                except BufferError:  # the client's queue is full: let it drain
                    producer.poll(0.001)
            if i % 1000 == 0:
                producer.poll(0)
        if producer.flush(120) != 0:
            raise RuntimeError("confluent-kafka did not deliver everything within 120 s")

    result.produce_rate = timed(n, work)
    if failed:
        raise RuntimeError(f"{len(failed)} timed Kafka sends failed: {failed[0]}")


def kafka_consume(bootstrap: str, n: int, result: Result) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) whenever
            # its prefetch queue is full; with a consumer this fast that pause dominates.
            "fetch.queue.backoff.ms": 0,
        }
    )
    consumer.subscribe([TOPIC])
    first = None
    while first is None or first.error() is not None:  # join the group, first fetch
        first = consumer.poll(1.0)

    def work() -> None:
        got = 1
        deadline = time.monotonic() + 120
        while got < n:
            batch = consumer.consume(min(10_000, n - got), 1.0)  # never wait for more than is due
            got += sum(1 for m in batch if m.error() is None)
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka consume got {got:,} of {n:,}")
        consumer.commit(asynchronous=False)

    result.consume_rate = timed(n - 1, work)
    consumer.close()


def kafka_paced(bootstrap: str, rate: int, seconds: float, result: Result) -> None:
    """Produce at ``rate`` msgs/s (1 ms ticks), timing one send in 10: unloaded latency."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    )

    def on_ack(sent_at: float, err: object, _msg: object) -> None:
        result.paced.append(time.perf_counter() - sent_at)

    start, sent, total = time.perf_counter(), 0, int(rate * seconds)
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate))
        for i in range(sent, due):
            callback = functools.partial(on_ack, time.perf_counter()) if i % 10 == 0 else None
            producer.produce(TOPIC + "-paced", MESSAGE, on_delivery=callback)
        sent = max(sent, due)
        producer.poll(0.001)
    producer.flush(60)


def raw_fetch(port: int, n: int) -> float:
    """Msgs/s of a bare Fetch loop (1 MiB per fetch, batch headers parsed, nothing else):
    what the server can hand out when no client library sits in between."""
    sock = socket.create_connection(("127.0.0.1", port))
    offset, correlation = 0, 0
    start = time.perf_counter()
    try:
        while offset < n:
            correlation += 1
            part = FetchRequest.FetchTopic.FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
            )
            request = FetchRequest[11](
                replica_id=-1,
                max_wait_ms=500,
                min_bytes=1,
                max_bytes=50 << 20,
                topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[part])],
            )
            request.with_header(correlation_id=correlation, client_id="bench")
            sock.sendall(bytes(request.encode(framed=True, header=True)))
            (size,) = struct.unpack(">i", _recv(sock, 4))
            answer = FetchResponse[11].decode(_recv(sock, size), header=True)
            for batch in records.split(answer.responses[0].partitions[0].records):
                header = records.read_header(batch)
                offset = header.base_offset + header.record_count
    finally:
        sock.close()
    return n / (time.perf_counter() - start)


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RuntimeError("the server closed the connection")
        buf += chunk
    return bytes(buf)


# -- Pulsar through pulsar-client ------------------------------------------------------------


def pulsar_produce(client: Any, n: int, every: int, result: Result) -> None:
    producer = client.create_producer(
        PULSAR_TOPIC,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=50_000,
        block_if_queue_full=True,
    )

    def on_ack(sent_at: float, res: Any, _mid: Any) -> None:
        result.latencies.append(time.perf_counter() - sent_at)

    def work() -> None:
        for i in range(n):
            if i % every == 0:
                producer.send_async(MESSAGE, functools.partial(on_ack, time.perf_counter()))
            else:
                producer.send_async(MESSAGE, None)
        producer.flush()

    result.produce_rate = timed(n, work)
    producer.close()


def pulsar_consume(client: Any, n: int, result: Result) -> None:
    consumer = client.subscribe(
        PULSAR_TOPIC,
        "bench",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=5000,
    )

    def work() -> None:
        for i in range(1, n + 1):
            msg = consumer.receive(timeout_millis=60_000)
            if i % 1000 == 0 or i == n:
                consumer.acknowledge_cumulative(msg)

    result.consume_rate = timed(n, work)
    consumer.close()


def bench_magnetar(args: argparse.Namespace, workdir: Path) -> tuple[Result, Result, Result]:
    kafka = Result("Magnetar · Kafka (confluent-kafka)")
    pulsar_result = Result("Magnetar · Pulsar (pulsar-client)")
    raw = Result("Magnetar · Kafka Fetch, bare protocol loop")
    with StandaloneProcess(workdir / "magnetar") as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        kafka_produce(bootstrap, args.messages, args.sample_every, kafka)
        kafka_consume(bootstrap, args.messages, kafka)
        raw.consume_rate = raw_fetch(server.kafka_port, args.messages)
        kafka_paced(bootstrap, args.paced_rate, args.paced_seconds, kafka)
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        try:
            pulsar_produce(client, args.messages, args.sample_every, pulsar_result)
            pulsar_consume(client, args.messages, pulsar_result)
        finally:
            client.close()
    return kafka, pulsar_result, raw


# -- Redis Streams peer ----------------------------------------------------------------------


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
            subprocess.run(command, check=True, env=env)
        found = shutil.which("redis-server")
    if found is None:
        raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
    return found


def bench_redis(args: argparse.Namespace, workdir: Path) -> Result:
    result = Result("Redis Streams (appendfsync always)")
    directory = workdir / "redis"
    directory.mkdir()
    port = free_port()
    command = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    command += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # waiting for a child process to listen, not for our own code
        result.produce_rate = timed(args.messages, lambda: _xadd(client, args, result))
        result.consume_rate = timed(args.messages, lambda: _xread(client, args.messages, args))
    finally:
        proc.terminate()
        proc.wait(10)
    return result


def _xadd(client: Any, args: argparse.Namespace, result: Result) -> None:
    for start in range(0, args.messages, args.pipeline):
        pipe, timed_at = client.pipeline(transaction=False), []
        for i in range(start, min(start + args.pipeline, args.messages)):
            if i % args.sample_every == 0:
                timed_at.append(time.perf_counter())
            pipe.xadd(STREAM, {b"d": MESSAGE})
        pipe.execute()
        done = time.perf_counter()
        result.latencies += [done - t for t in timed_at]


def _xread(client: Any, n: int, args: argparse.Namespace) -> None:
    got, last = 0, b"0"
    while got < n:
        entries = client.xread({STREAM: last}, count=args.pipeline)[0][1]
        last = entries[-1][0]
        got += len(entries)


# -- report ----------------------------------------------------------------------------------


def rows(results: Sequence[Result]) -> list[list[str]]:
    out = []
    for r in results:
        paced = [fmt_ms(percentile(r.paced, 50)), fmt_ms(percentile(r.paced, 99))]
        saturated = [fmt_rate(r.produce_rate), fmt_ms(r.p50), fmt_ms(r.p99)]
        out.append([r.system, *saturated, *paced, fmt_rate(r.consume_rate)])
    return out


HEADERS = [
    "system",
    "produce msgs/s",
    "p50 ms (saturated)",
    "p99 ms (saturated)",
    "p50 ms (paced)",
    "p99 ms (paced)",
    "consume msgs/s",
]


def verdict(kafka: Result) -> list[str]:
    def met(value: float, goal: float) -> str:
        return "met" if value >= goal else "NOT met"

    return [
        f"produce ≥ {PRODUCE_GOAL:,} msgs/s: {met(kafka.produce_rate, PRODUCE_GOAL)} "
        f"({fmt_rate(kafka.produce_rate)})",
        f"consume ≥ {CONSUME_GOAL:,} msgs/s: {met(kafka.consume_rate, CONSUME_GOAL)} "
        f"({fmt_rate(kafka.consume_rate)})",
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--sample-every", type=int, default=100, help="time one send in N")
    p.add_argument("--pipeline", type=int, default=1000, help="Redis XADDs per pipeline")
    p.add_argument("--paced-rate", type=int, default=20_000, help="msgs/s of the paced run")
    p.add_argument("--paced-seconds", type=float, default=3.0)
    p.add_argument("--dir", type=Path, default=None, help="work directory (a real disk)")
    p.add_argument("--skip-redis", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, fs = make_workdir(args.dir, "magnetar-kafka-bench-")
    try:
        kafka, pulsar_result, raw = bench_magnetar(args, workdir)
        results = [kafka, raw, pulsar_result]
        if not args.skip_redis:
            results.append(bench_redis(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.messages:,} messages of {len(MESSAGE)} bytes; disk {fs.device} ({fs.fstype})")
    print(render_table(HEADERS, rows(results)))
    print("\n".join(verdict(kafka)))
    print("\nMarkdown:\n" + render_markdown_table(HEADERS, rows(results)))
    write_json(
        RESULTS_DIR / "kafka_protocol.json",
        {
            "when": utc_now(),
            "machine": machine_info(),
            "messages": args.messages,
            "results": [
                {
                    "system": r.system,
                    "produce_rate": r.produce_rate,
                    "produce_p50_s": r.p50,
                    "produce_p99_s": r.p99,
                    "consume_rate": r.consume_rate,
                    "paced_p50_s": percentile(r.paced, 50),
                    "paced_p99_s": percentile(r.paced, 99),
                }
                for r in results
            ],
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
