"""Publish throughput over TLS next to plain text, same server, same run (issue 16).

One standalone with TLS on (a certificate from a CA made for the run). For each protocol,
``--messages`` messages of ``--size`` bytes are published through the plain listener and
through the TLS one, alternating, ``--rounds`` times:

- Pulsar: pulsar-client ``send_async`` (batching on, ``block_if_queue_full``) over
  ``pulsar://`` and ``pulsar+ssl://``, timed to the last receipt;
- Kafka: confluent-kafka ``produce`` + ``flush`` over ``PLAINTEXT`` and ``SSL``.

The bound, measured in the same run (``bench/tls_sink.py``): ``--sink-mb`` MB pushed through
a bare asyncio server that only counts bytes, over a plain and a TLS listener — what
Python's asyncio SSL transport costs on its own, with no Kafka or Pulsar code.

Reported: messages/s and MB/s (median of the rounds), TLS / plain (goal >= 0.7), and the
server's CPU time per message (all its threads, from /proc: less sensitive to a loaded
machine than the rates).
Run: ``PYTHONPATH=. .venv/bin/python bench/tls.py [--messages 200000 --size 100]
[--protocols kafka]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid
from collections.abc import Callable, Sequence

import pulsar
from confluent_kafka import Producer

from bench import tls_sink
from bench.common import (
    MB,
    RESULTS_DIR,
    machine_info,
    make_workdir,
    process_cpu_seconds,
    render_table,
    utc_now,
    write_json,
)
from magnetar.testing.certs import TestCA
from magnetar.testing.server import StandaloneProcess, free_port


def pulsar_publish(url: str, trust: str, count: int, payload: bytes) -> float:
    """Seconds to publish ``count`` messages and have every receipt."""
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=trust,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        producer = client.create_producer(
            f"bench-tls-{uuid.uuid4().hex[:8]}",
            block_if_queue_full=True,
            max_pending_messages=10_000,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
        )
        failures: list[object] = []

        def done(result: object, _msg_id: object) -> None:
            if result != pulsar.Result.Ok:
                failures.append(result)

        started = time.perf_counter()
        for _ in range(count):
            producer.send_async(payload, done)
        producer.flush()
        elapsed = time.perf_counter() - started
        assert not failures, f"{len(failures)} sends failed: {failures[:3]}"
        return elapsed
    finally:
        client.close()


def kafka_publish(conf: dict[str, str], count: int, payload: bytes) -> float:
    producer = Producer({**conf, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    topic = f"bench-tls-k-{uuid.uuid4().hex[:8]}"
    producer.produce(topic, b"warm-up")  # creates the topic outside the timed part
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert remaining == 0, f"{remaining} messages not delivered"
    return elapsed


def measure(run: Callable[[], float], rounds: int) -> list[float]:
    return [run() for _ in range(rounds)]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--protocols", default="pulsar,kafka", help="comma-separated: pulsar, kafka"
    )
    parser.add_argument("--sink-mb", type=int, default=200, help="MB through the bare sink")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, _ = make_workdir(None, prefix="magnetar-tls-bench-")
    ca = TestCA(workdir / "certs")
    cert = ca.server()
    ports = {"pulsar": free_port(), "https": free_port(), "kafka": free_port()}
    extra = [
        "--tls-enabled", "true", "--pulsar-tls-port", str(ports["pulsar"]),
        "--https-port", str(ports["https"]), "--kafka-ssl-port", str(ports["kafka"]),
        "--tls-certificate-file", str(cert.cert), "--tls-key-file", str(cert.key),
    ]  # fmt: skip
    payload = b"x" * args.size
    trust = str(ca.cert)
    seconds: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # the server's CPU seconds (all threads) per round
    with StandaloneProcess(workdir / "data", extra_args=extra) as server:
        plain_kafka = {"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"}
        ssl_kafka = {
            "bootstrap.servers": f"127.0.0.1:{ports['kafka']}",
            "security.protocol": "SSL",
            "ssl.ca.location": trust,
        }
        cases: dict[str, Callable[[], float]] = {
            "pulsar plain": lambda: pulsar_publish(server.pulsar_url, trust, args.messages,
                                                   payload),
            "pulsar TLS": lambda: pulsar_publish(f"pulsar+ssl://127.0.0.1:{ports['pulsar']}",
                                                 trust, args.messages, payload),
            "kafka plain": lambda: kafka_publish(plain_kafka, args.messages, payload),
            "kafka TLS": lambda: kafka_publish(ssl_kafka, args.messages, payload),
        }  # fmt: skip
        wanted = set(args.protocols.split(","))
        cases = {name: run for name, run in cases.items() if name.split()[0] in wanted}
        assert server.proc is not None
        pid = server.proc.pid
        for _ in range(args.rounds):  # alternate, so load on the machine hits both alike
            for name, run in cases.items():
                before = process_cpu_seconds(pid)
                seconds.setdefault(name, []).append(run())
                cpu.setdefault(name, []).append(process_cpu_seconds(pid) - before)
    sink_bytes = args.sink_mb * MB
    sink = tls_sink.measure(cert.cert, cert.key, ca.cert, sink_bytes, args.rounds)
    shutil.rmtree(workdir, ignore_errors=True)
    rate = {name: args.messages / statistics.median(s) for name, s in seconds.items()}
    rows = []
    for name, r in rate.items():
        protocol, kind = name.split()
        ratio = f"{r / rate[f'{protocol} plain']:.2f}" if kind == "TLS" else ""
        per_message = statistics.median(cpu[name]) / args.messages * 1e6
        rows.append([name, f"{r:,.0f}", f"{r * args.size / 1e6:.1f}", ratio, f"{per_message:.2f}"])
    sink_rate = {name: sink_bytes / statistics.median(s) / MB for name, s in sink.items()}
    for name, r in sink_rate.items():
        ratio = f"{r / sink_rate['asyncio sink plain']:.2f}" if name.endswith("TLS") else ""
        rows.append([name, "", f"{r:,.0f}", ratio, ""])
    seconds.update(sink)
    print(f"{args.messages} messages of {args.size} B, median of {args.rounds} rounds")
    print(render_table(["case", "msgs/s", "MB/s", "TLS / plain", "server CPU us/msg"], rows))
    write_json(
        RESULTS_DIR / "tls.json",
        {
            "when": utc_now(),
            "machine": machine_info(),
            "args": vars(args),
            "seconds": seconds,
            "server_cpu_seconds": cpu,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
