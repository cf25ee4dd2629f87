"""Pulsar protocol benchmark: Magnetar through the official ``pulsar-client`` against a Redis
Streams peer doing the same work, in the same run, on the same disk.

Both sides make every write durable before acknowledging it: Magnetar runs with
``fsync=always``; Redis with ``appendonly yes``, ``appendfsync always``. Messages are 100 bytes,
one topic (one stream). Per system:

* **publish** — ``--messages`` messages as fast as the client goes. Magnetar: one producer,
  batching on, ``send_async`` in a loop; latency is send_async → ack callback, timed for one
  message in ``--sample-every`` (a Python callback on every message caps the client at about
  30k msgs/s: see ``AckRecorder``). Redis: pipelines of ``--pipeline`` XADDs; latency is from
  queuing an XADD to its pipeline's reply, timed for the same messages. Under saturation
  both latencies are mostly waiting in the client's queue (see "paced" for the unloaded case).
* **paced / end-to-end** — a producer sends ``--paced-rate`` msgs/s for ``--paced-seconds``
  while a consumer on the tail receives; the payload starts with the send time
  (``perf_counter``). Magnetar: the same batching producer, a consumer thread subscribed at
  the latest position, acking each message. Redis: the messages due at each check of the
  pacer (about every 0.5 ms) go as one pipeline; a reader thread does XREAD BLOCK. Gives
  publish and publish → receive latency.
* **catch-up** — the publish backlog consumed from the start by a fresh subscription.
  Magnetar: ``receiver_queue_size`` ``--receiver-queue``, ``receive()`` per message and a
  cumulative ack every ``--ack-every`` messages. Redis: XREADGROUP COUNT ``--pipeline`` with
  the XACK of the previous batch pipelined in front (an ack per message, as in the
  consumer-group idiom); and, for reference, plain XREAD COUNT ``--pipeline`` (no state kept).

The physical limit is measured in the same run: ``os.write`` + ``os.fsync`` of 100 bytes in a
loop, in the data directory. The benchmark installs what it lacks: ``redis-server`` with
apt-get (as root) and ``redis`` (redis-py) with pip into the running interpreter.

Run: ``PYTHONPATH=. .venv/bin/python bench/pulsar_protocol.py [--messages N]``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from bench.common import (
    RESULTS_DIR,
    Filesystem,
    fmt_ms,
    fmt_rate,
    machine_info,
    make_workdir,
    percentile,
    process_cpu_seconds,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from magnetar.testing.server import StandaloneProcess, free_port

MESSAGE_BYTES = 100
TOPIC = "persistent://public/default/bench-publish"
PACED_TOPIC = "persistent://public/default/bench-paced"
STREAM = b"bench-publish"
PACED_STREAM = b"bench-paced"
STAMP = struct.Struct("<d")  # perf_counter() at send, at the front of a paced payload
TICK = 0.0005  # the paced sender's sleep between checks for due messages, seconds
PUBLISH_GOAL_RATE = 300_000
PUBLISH_GOAL_RATIO = 5.0
LATENCY_GOAL_FSYNCS = 2.0
CATCHUP_GOAL_RATIO = 3.0


# -- figures --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Latencies:
    samples: int
    p50: float  # seconds
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latencies:
        top = max(values, default=float("nan"))
        return cls(len(values), percentile(values, 50), percentile(values, 99), top)


@dataclass(frozen=True, slots=True)
class Throughput:
    messages: int
    seconds: float
    server_cpu: float  # CPU seconds the server process used during the phase
    client_cpu: float  # CPU seconds this process (all threads) used during the phase
    load: float  # the 1-minute load average at the end (other work on the machine)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("nan")

    @property
    def server_cpu_pct(self) -> float:
        return 100 * self.server_cpu / self.seconds

    @property
    def client_cpu_pct(self) -> float:
        return 100 * self.client_cpu / self.seconds


@dataclass(slots=True)
class Stopwatch:
    """Wall time and the CPU time of the server and of this process over one phase."""

    server_pid: int
    wall: float = field(default_factory=time.perf_counter)
    server_cpu: float = 0.0
    client_cpu: float = field(default_factory=time.process_time)

    def __post_init__(self) -> None:
        self.server_cpu = process_cpu_seconds(self.server_pid)

    def stop(self, messages: int) -> Throughput:
        return Throughput(
            messages,
            time.perf_counter() - self.wall,
            process_cpu_seconds(self.server_pid) - self.server_cpu,
            time.process_time() - self.client_cpu,
            os.getloadavg()[0],
        )


@dataclass(frozen=True, slots=True)
class SystemResult:
    name: str
    version: str
    publish: Throughput
    publish_latency: Latencies
    paced_rate: float  # msgs/s actually sent in the paced phase
    paced_publish_latency: Latencies
    end_to_end: Latencies
    catchup: Throughput
    catchup_plain: Throughput | None = None  # Redis XREAD without a group

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in ("publish", "catchup", "catchup_plain"):
            phase = getattr(self, name)
            if phase is not None:
                out[name]["msgs_per_s"] = phase.msgs_per_s
                out[name]["server_cpu_pct"] = phase.server_cpu_pct
                out[name]["client_cpu_pct"] = phase.client_cpu_pct
        return out


def measure_fsync(directory: Path, seconds: float) -> Latencies:
    """The physical limit: ``os.write`` + ``os.fsync`` of 100 bytes, one after another."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    record, samples = b"f" * MESSAGE_BYTES, []
    try:
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            os.write(fd, record)
            os.fsync(fd)
            samples.append(time.perf_counter() - now)
    finally:
        os.close(fd)
        path.unlink()
    return Latencies.of(samples)


def run_paced(rate: float, seconds: float, send: Callable[[int], None]) -> float:
    """Call ``send(n)`` with the messages that fell due since the last call, until
    ``rate * seconds`` messages went out; returns the rate achieved."""
    total, done = int(rate * seconds), 0
    start = time.perf_counter()
    while done < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        if due > done:
            send(due - done)
            done = due
        else:
            time.sleep(TICK)
    return total / (time.perf_counter() - start)


def stamped_payload() -> bytes:
    return STAMP.pack(time.perf_counter()).ljust(MESSAGE_BYTES, b"p")


def age_of(payload: bytes) -> float:
    return time.perf_counter() - STAMP.unpack_from(payload)[0]


# -- Magnetar through pulsar-client ---------------------------------------------------------


class AckRecorder:
    """Send → ack latency of one producer, timed for every ``sample_every``-th message and
    the last; the others go without a callback. A Python callback per message would cap
    the client, not the broker: the C++ client's I/O thread takes the GIL for each one,
    contending with the sending thread (about 30k msgs/s here, against 100k+ when sampled).
    Sent without a callback, a failure goes unseen here; the catch-up phase then finds the
    topic short and fails."""

    def __init__(self, producer: Any, expected: int, sample_every: int) -> None:
        self.producer, self.expected, self.sample_every = producer, expected, sample_every
        self.sampled = len(range(0, expected - 1, sample_every)) + 1  # the last is always
        self.latencies: list[float] = []
        self.sent = self.failed = 0
        self.done = threading.Event()

    def send(self, payload: bytes) -> None:
        i, self.sent = self.sent, self.sent + 1
        if i % self.sample_every == 0 or i == self.expected - 1:
            on_ack = functools.partial(self.on_ack, time.perf_counter())
            self.producer.send_async(payload, on_ack)
        else:
            self.producer.send_async(payload, None)

    def on_ack(self, sent_at: float, result: Any, _msg_id: Any) -> None:
        self.latencies.append(time.perf_counter() - sent_at)
        if result != pulsar.Result.Ok:
            self.failed += 1
        if len(self.latencies) == self.sampled:
            self.done.set()

    def wait(self, timeout: float) -> Latencies:
        """Once every message is acked (``flush``), the timed ones' latencies."""
        self.producer.flush()
        if not self.done.wait(timeout):
            raise RuntimeError(f"{len(self.latencies):,} of {self.sampled:,} timed sends acked")
        if self.failed:
            raise RuntimeError(f"{self.failed:,} of {self.sampled:,} timed sends failed")
        return Latencies.of(self.latencies)


def producer_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "batching_enabled": True,
        "batching_max_messages": args.batch_messages,
        "batching_max_publish_delay_ms": args.batch_delay_ms,
        "max_pending_messages": args.max_pending,
        "block_if_queue_full": True,
    }


def magnetar_publish(
    client: Any, args: argparse.Namespace, pid: int
) -> tuple[Throughput, Latencies]:
    producer = client.create_producer(TOPIC, **producer_options(args))
    recorder = AckRecorder(producer, args.messages, args.sample_every)
    payload = b"m" * MESSAGE_BYTES
    watch = Stopwatch(pid)
    for _ in range(args.messages):
        recorder.send(payload)
    latencies = recorder.wait(args.timeout)
    throughput = watch.stop(args.messages)
    producer.close()
    return throughput, latencies


def magnetar_catchup(client: Any, args: argparse.Namespace, pid: int) -> Throughput:
    consumer = client.subscribe(
        TOPIC,
        "catchup",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=args.receiver_queue,
    )
    watch = Stopwatch(pid)
    timeout_ms = int(args.timeout * 1000)
    for i in range(1, args.messages + 1):
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            raise RuntimeError(f"catch-up got {i - 1:,} of {args.messages:,} messages") from None
        if i % args.ack_every == 0 or i == args.messages:
            consumer.acknowledge_cumulative(msg)
    throughput = watch.stop(args.messages)
    consumer.close()
    return throughput


def magnetar_paced(client: Any, args: argparse.Namespace) -> tuple[float, Latencies, Latencies]:
    total = int(args.paced_rate * args.paced_seconds)
    consumer = client.subscribe(PACED_TOPIC, "tail", receiver_queue_size=args.receiver_queue)
    ages: list[float] = []

    def receive_all() -> None:
        for _ in range(total):
            msg = consumer.receive(timeout_millis=int(args.timeout * 1000))
            ages.append(age_of(msg.data()))
            consumer.acknowledge(msg)

    reader = threading.Thread(target=receive_all, daemon=True)
    reader.start()
    producer = client.create_producer(PACED_TOPIC, **producer_options(args))
    recorder = AckRecorder(producer, total, 1)  # a callback each: cheap at this rate

    def send(n: int) -> None:
        for _ in range(n):
            recorder.send(stamped_payload())

    rate = run_paced(args.paced_rate, args.paced_seconds, send)
    publish = recorder.wait(args.timeout)
    reader.join(args.timeout)
    if len(ages) != total:
        raise RuntimeError(f"the tail consumer received {len(ages):,} of {total:,} messages")
    producer.close()
    consumer.close()
    return rate, publish, Latencies.of(ages)


@contextlib.contextmanager
def magnetar_side(args: argparse.Namespace, workdir: Path) -> Iterator[Side]:
    data_dir = workdir / "magnetar"
    data_dir.mkdir()
    with StandaloneProcess(data_dir, extra_args=["--fsync", "always"]) as server:
        assert server.proc is not None
        pid = server.proc.pid
        print(f"magnetar standalone pid {pid} on {server.pulsar_url}", flush=True)
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        client = pulsar.Client(server.pulsar_url, logger=logger)
        try:
            yield Side(
                "magnetar",
                f"pulsar-client {importlib.metadata.version('pulsar-client')}",
                publish=functools.partial(magnetar_publish, client, args, pid),
                catchup=functools.partial(magnetar_catchup, client, args, pid),
                paced=functools.partial(magnetar_paced, client, args),
            )
        finally:
            client.close()


# -- Redis Streams peer ---------------------------------------------------------------------


def ensure_redis_server() -> str:
    """The ``redis-server`` binary, installed with apt-get when missing (root only)."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("redis-server is not installed: run `apt-get install -y redis-server`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
        print(f"redis-server is missing: running {' '.join(command)}", flush=True)
        subprocess.run(command, check=True, env=env)
    found = shutil.which("redis-server")
    if not found:
        raise SystemExit("apt-get installed redis-server but it is not on PATH")
    return found


def import_redis() -> Any:
    """redis-py, installed with pip into this interpreter when missing."""
    try:
        return importlib.import_module("redis")
    except ModuleNotFoundError:
        command = [sys.executable, "-m", "pip", "install", "redis"]
        print(f"redis-py is missing: running {' '.join(command)}", flush=True)
        subprocess.run(command, check=True)
        importlib.invalidate_caches()
        return importlib.import_module("redis")


@dataclass
class RedisServer:
    """A private ``redis-server`` with every write fsynced before its reply."""

    binary: str
    directory: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            self.binary,
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)),
            *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
        ]

    def __enter__(self) -> RedisServer:
        log = (self.directory / "redis.log").open("wb")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def connect(self, redis: Any, timeout: float = 20) -> Any:
        """A client once the server answers PING."""
        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return client
            except redis.ConnectionError:
                if time.monotonic() > deadline or (self.proc and self.proc.poll() is not None):
                    log = (self.directory / "redis.log").read_text(errors="replace")
                    raise RuntimeError(f"redis-server did not start:\n{log[-2000:]}") from None
                time.sleep(0.05)


def redis_publish(client: Any, args: argparse.Namespace, pid: int) -> tuple[Throughput, Latencies]:
    payload, latencies, every = {b"d": b"r" * MESSAGE_BYTES}, [], args.sample_every
    watch = Stopwatch(pid)
    for start in range(0, args.messages, args.pipeline):
        pipe, queued = client.pipeline(transaction=False), []
        for i in range(start, min(start + args.pipeline, args.messages)):
            if i % every == 0 or i == args.messages - 1:  # timed like Magnetar's sends
                queued.append(time.perf_counter())
            pipe.xadd(STREAM, payload)
        pipe.execute()
        done = time.perf_counter()
        latencies += [done - t for t in queued]
    return watch.stop(args.messages), Latencies.of(latencies)


def redis_catchup_group(client: Any, args: argparse.Namespace, pid: int) -> Throughput:
    client.xgroup_create(STREAM, "catchup", id="0")
    ids: list[bytes] = []
    watch, got = Stopwatch(pid), 0
    while got < args.messages:
        pipe = client.pipeline(transaction=False)
        if ids:
            pipe.xack(STREAM, "catchup", *ids)
        pipe.xreadgroup("catchup", "c1", {STREAM: ">"}, count=args.pipeline)
        reply = pipe.execute()[-1]
        if not reply:
            raise RuntimeError(f"XREADGROUP ran dry after {got:,} of {args.messages:,}")
        ids = [entry_id for entry_id, _ in reply[0][1]]
        got += len(ids)
    client.xack(STREAM, "catchup", *ids)
    return watch.stop(got)


def redis_catchup_plain(client: Any, args: argparse.Namespace, pid: int) -> Throughput:
    watch, got, last = Stopwatch(pid), 0, b"0"
    while got < args.messages:
        reply = client.xread({STREAM: last}, count=args.pipeline)
        if not reply:
            raise RuntimeError(f"XREAD ran dry after {got:,} of {args.messages:,}")
        entries = reply[0][1]
        last = entries[-1][0]
        got += len(entries)
    return watch.stop(got)


def redis_paced(
    client: Any, reader_client: Any, args: argparse.Namespace
) -> tuple[float, Latencies, Latencies]:
    total = int(args.paced_rate * args.paced_seconds)
    first = client.xadd(PACED_STREAM, {b"d": b"start"})  # the reader follows from here
    ages: list[float] = []

    def receive_all() -> None:
        last = first
        while len(ages) < total:
            reply = reader_client.xread({PACED_STREAM: last}, count=args.pipeline, block=1000)
            for entry_id, fields in reply[0][1] if reply else ():
                ages.append(age_of(fields[b"d"]))
                last = entry_id

    reader = threading.Thread(target=receive_all, daemon=True)
    reader.start()
    publish: list[float] = []

    def send(n: int) -> None:
        pipe, queued = client.pipeline(transaction=False), []
        for _ in range(n):
            payload = stamped_payload()
            queued.append(STAMP.unpack_from(payload)[0])
            pipe.xadd(PACED_STREAM, {b"d": payload})
        pipe.execute()
        done = time.perf_counter()
        publish.extend(done - t for t in queued)

    rate = run_paced(args.paced_rate, args.paced_seconds, send)
    reader.join(args.timeout)
    if len(ages) != total:
        raise RuntimeError(f"the XREAD reader received {len(ages):,} of {total:,} messages")
    return rate, Latencies.of(publish), Latencies.of(ages)


@contextlib.contextmanager
def redis_side(args: argparse.Namespace, workdir: Path) -> Iterator[Side]:
    binary, redis = ensure_redis_server(), import_redis()
    directory = workdir / "redis"
    directory.mkdir()
    with RedisServer(binary, directory) as server:
        assert server.proc is not None
        pid, client = server.proc.pid, server.connect(redis)
        version = client.info("server")["redis_version"]
        print(f"redis-server {version} pid {pid} on port {server.port}", flush=True)
        yield Side(
            "redis",
            f"redis-server {version}, redis-py {redis.__version__}",
            publish=functools.partial(redis_publish, client, args, pid),
            catchup=functools.partial(redis_catchup_group, client, args, pid),
            paced=functools.partial(redis_paced, client, server.connect(redis), args),
            catchup_plain=functools.partial(redis_catchup_plain, client, args, pid),
        )


# -- both, in turn --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Side:
    """One system under test, as its measurements ready to run."""

    name: str
    version: str
    publish: Callable[[], tuple[Throughput, Latencies]]
    catchup: Callable[[], Throughput]
    paced: Callable[[], tuple[float, Latencies, Latencies]]
    catchup_plain: Callable[[], Throughput] | None = None


PHASES = ("publish", "catchup", "catchup_plain", "paced")


def run_in_turn(sides: Sequence[Side]) -> list[SystemResult]:
    """Each measurement on every system back to back before the next measurement, so that
    all see much the same machine: on a shared 2-core VM other work comes and goes over
    the minutes a run takes, and one system measured after the other would see different
    neighbours."""
    figures: dict[str, dict[str, Any]] = {side.name: {} for side in sides}
    for phase in PHASES:
        for side in sides:
            run = getattr(side, phase)
            if run is not None:
                figures[side.name][phase] = figure = run()
                report_phase(f"{side.name} {phase}", figure)
    return [result_of(side, figures[side.name]) for side in sides]


def result_of(side: Side, figures: dict[str, Any]) -> SystemResult:
    publish, publish_latency = figures["publish"]
    rate, paced, e2e = figures["paced"]
    catchup, plain = figures["catchup"], figures.get("catchup_plain")
    return SystemResult(
        side.name, side.version, publish, publish_latency, rate, paced, e2e, catchup, plain
    )


def report_phase(name: str, figure: Any) -> None:
    if isinstance(figure, tuple) and isinstance(figure[0], Throughput):
        figure = figure[0]
    if isinstance(figure, Throughput):
        line = (
            f"{figure.messages:,} msgs in {figure.seconds:.1f} s = {figure.msgs_per_s:,.0f} "
            f"msgs/s (server CPU {figure.server_cpu_pct:.0f} %, client CPU "
            f"{figure.client_cpu_pct:.0f} %, load {figure.load:.1f})"
        )
    else:
        rate, publish, e2e = figure
        line = f"{rate:,.0f} msgs/s, publish p99 {fmt_ms(publish.p99)} ms, e2e p99 "
        line += f"{fmt_ms(e2e.p99)} ms"
    print(f"{name}: {line}", flush=True)


# -- report ---------------------------------------------------------------------------------


HEADERS = ["measure", "Magnetar", "Redis", "Magnetar/Redis", "goal", "verdict"]


@dataclass(frozen=True, slots=True)
class Goal:
    text: str
    value: float
    target: float
    at_most: bool  # True: value <= target (a latency); False: value >= target (a rate)

    @property
    def met(self) -> bool:
        return self.value <= self.target if self.at_most else self.value >= self.target

    def cells(self) -> list[str]:
        bound = f"<= {fmt_ms(self.target)} ms" if self.at_most else f">= {fmt_rate(self.target)}"
        return [bound, "MET" if self.met else "NOT MET"]


def goal_verdicts(ours: SystemResult, peer: SystemResult, fsync: Latencies) -> dict[str, Goal]:
    rate = ours.publish.msgs_per_s
    limit = LATENCY_GOAL_FSYNCS * fsync.p50
    fsyncs = f"<= {LATENCY_GOAL_FSYNCS:g}x one fsync (p50)"
    goals = {
        "publish": Goal(
            f"publish >= {PUBLISH_GOAL_RATIO:g}x the peer and >= {PUBLISH_GOAL_RATE:,} msgs/s",
            rate,
            max(PUBLISH_GOAL_RATIO * peer.publish.msgs_per_s, PUBLISH_GOAL_RATE),
            at_most=False,
        ),
        "latency_sat": Goal(
            f"p99 publish latency (saturated) {fsyncs}", ours.publish_latency.p99, limit, True
        ),
        "latency_paced": Goal(
            f"p99 publish latency (paced) {fsyncs}", ours.paced_publish_latency.p99, limit, True
        ),
    }
    for key, phase in (("XREADGROUP+XACK", peer.catchup), ("XREAD", peer.catchup_plain)):
        if phase is not None:
            text = f"catch-up >= {CATCHUP_GOAL_RATIO:g}x the peer's {key}"
            target = CATCHUP_GOAL_RATIO * phase.msgs_per_s
            goals[f"catchup {key}"] = Goal(text, ours.catchup.msgs_per_s, target, False)
    return goals


def row(
    label: str, ours: float, peer: float, show: Callable[[float], str], goal: Goal | None = None
) -> list[str]:
    judged = goal.cells() if goal else ["", ""]
    return [label, show(ours), show(peer), f"{ours / peer:.2f}x", *judged]


def micros(seconds: float) -> str:
    return f"{seconds * 1e6:.2f}"


def table_rows(ours: SystemResult, peer: SystemResult, goals: dict[str, Goal]) -> list[list[str]]:
    sat = (ours.publish_latency, peer.publish_latency)
    paced = (ours.paced_publish_latency, peer.paced_publish_latency)
    e2e = (ours.end_to_end, peer.end_to_end)
    publish = (ours.publish.msgs_per_s, peer.publish.msgs_per_s)
    rows = [
        row("publish msgs/s", *publish, fmt_rate, goals["publish"]),
        row("publish p50 ms (saturated)", sat[0].p50, sat[1].p50, fmt_ms),
        row("publish p99 ms (saturated)", sat[0].p99, sat[1].p99, fmt_ms, goals["latency_sat"]),
        row("publish p50 ms (paced)", paced[0].p50, paced[1].p50, fmt_ms),
        row("publish p99 ms (paced)", paced[0].p99, paced[1].p99, fmt_ms, goals["latency_paced"]),
        row("end-to-end p50 ms (paced)", e2e[0].p50, e2e[1].p50, fmt_ms),
        row("end-to-end p99 ms (paced)", e2e[0].p99, e2e[1].p99, fmt_ms),
    ]
    for key, phase in (("XREADGROUP+XACK", peer.catchup), ("XREAD", peer.catchup_plain)):
        if phase is not None:
            label, goal = f"catch-up msgs/s (Redis: {key})", goals[f"catchup {key}"]
            rows.append(row(label, ours.catchup.msgs_per_s, phase.msgs_per_s, fmt_rate, goal))
    for label, a, b in paired_phases(ours, peer):
        per_msg = f"server CPU µs/msg, {label}"
        rows.append(row(per_msg, a.server_cpu / a.messages, b.server_cpu / b.messages, micros))
    return rows


def paired_phases(
    ours: SystemResult, peer: SystemResult
) -> list[tuple[str, Throughput, Throughput]]:
    return [("publish", ours.publish, peer.publish), ("catch-up", ours.catchup, peer.catchup)]


def print_report(
    ours: SystemResult, peer: SystemResult, fsync: Latencies, goals: dict[str, Goal], md: bool
) -> None:
    render = render_markdown_table if md else render_table
    print(
        f"\nfsync baseline: write+fsync of {MESSAGE_BYTES} B, {fsync.samples:,} samples, "
        f"p50 {fmt_ms(fsync.p50)} ms, p99 {fmt_ms(fsync.p99)} ms; paced phase: Magnetar "
        f"{ours.paced_rate:,.0f} msgs/s, Redis {peer.paced_rate:,.0f} msgs/s"
    )
    for name, a, b in paired_phases(ours, peer):
        print(
            f"CPU during {name} (100 % = one core): server {a.server_cpu_pct:.0f} % vs "
            f"{b.server_cpu_pct:.0f} %, client {a.client_cpu_pct:.0f} % vs {b.client_cpu_pct:.0f} %"
        )
    print()
    print(render(HEADERS, table_rows(ours, peer, goals)))
    print()
    for goal in goals.values():
        print(f"goal {'MET' if goal.met else 'NOT MET'}: {goal.text}")


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=1_000_000, help="published, then caught up")
    p.add_argument("--batch-messages", type=int, default=1000, help="producer batch size")
    p.add_argument("--batch-delay-ms", type=int, default=1, help="producer batch delay")
    p.add_argument("--max-pending", type=int, default=100_000, help="producer queue bound")
    p.add_argument("--sample-every", type=int, default=100, help="time 1 in N publishes")
    p.add_argument("--receiver-queue", type=int, default=10_000, help="consumer prefetch")
    p.add_argument("--ack-every", type=int, default=1000, help="cumulative ack interval")
    p.add_argument("--pipeline", type=int, default=1000, help="Redis commands per pipeline")
    p.add_argument("--paced-rate", type=float, default=5000, help="paced phase msgs/s")
    p.add_argument("--paced-seconds", type=float, default=5, help="paced phase length")
    p.add_argument("--fsync-seconds", type=float, default=2, help="fsync baseline length")
    p.add_argument("--timeout", type=float, default=120, help="give up a phase after S")
    p.add_argument("--dir", type=Path, help="where data goes (default: the temp dir if on disk)")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "pulsar_protocol.json")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    counts = ("messages", "batch_messages", "pipeline", "ack_every", "sample_every")
    if min(getattr(args, name) for name in counts) < 1:
        p.error("--" + ", --".join(n.replace("_", "-") for n in counts) + " must be >= 1")
    return args


@contextlib.contextmanager
def workdir_for(requested: Path | None) -> Iterator[tuple[Path, Filesystem]]:
    workdir, fs = make_workdir(requested, prefix="magnetar-pulsar-bench-")
    print(f"{utc_now()}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})")
    try:
        yield workdir, fs
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started, load_start = utc_now(), os.getloadavg()
    with workdir_for(args.dir) as (workdir, fs):
        fsync = measure_fsync(workdir, args.fsync_seconds)
        print(f"fsync baseline: p50 {fmt_ms(fsync.p50)} ms, p99 {fmt_ms(fsync.p99)} ms", flush=True)
        with magnetar_side(args, workdir) as magnetar, redis_side(args, workdir) as redis:
            ours, peer = run_in_turn([magnetar, redis])
    goals = goal_verdicts(ours, peer, fsync)
    print_report(ours, peer, fsync, goals, args.markdown)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report = {
        "benchmark": "pulsar_protocol",
        "started": started,
        "command": " ".join(["bench/pulsar_protocol.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "filesystem": dataclasses.asdict(fs),
        "config": {**config, "message_bytes": MESSAGE_BYTES, "fsync": "always"},
        "fsync_baseline": dataclasses.asdict(fsync),
        "results": [ours.to_json(), peer.to_json()],
        "goals": [{**dataclasses.asdict(g), "met": g.met} for g in goals.values()],
        "load_average": {"start": load_start, "end": os.getloadavg()},
    }
    write_json(args.json, report)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
