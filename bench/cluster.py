"""Cluster storage benchmark (issue 14): one broker on three storage nodes against ``magnetar
standalone`` (local storage), the same workload in the same run, through ``pulsar-client`` and
``confluent-kafka``; and the time a dead storage node's ledgers take to be back at their
write quorum.

Systems, all up at once for the whole run, each on free ports of its own and on one disk;
every journal (the standalone's, each storage node's) fsyncs before acknowledging:

* **standalone** — local storage, SQLite metadata.
* **E=Qw=Qa=2** — ``magnetar broker`` over three ``magnetar storage-node`` processes and a
  ZooKeeper (Debian's): every entry on two nodes, acknowledged once both have it on disk.
* **E=Qw=3, Qa=2** — the same over three other nodes: every entry on all three,
  acknowledged at two.

Measures, each on every system back to back before the next one (so that all see much the
same neighbours on a shared machine), ``--rounds`` times; the tables give medians:

* **publish** — pulsar-client, ``--messages`` messages of ``--message-bytes`` as fast as the
  client goes: batching producer, ``send_async`` in a loop, latency send_async → ack callback
  of one message in ``--sample-every`` (mostly time queued in the client).
* **paced** — pulsar-client at ``--paced-rate`` msgs/s for ``--paced-seconds``, every
  message timed send_async → ack callback: latency with nothing queued. The latency goal is
  judged on its p99.
* **produce** — confluent-kafka, ``acks=all``, ``linger.ms=5``, the same messages.

CPU is each process's user+system time (``/proc/PID/stat``) over the phase: where the
replicated path spends what the standalone does not.

**Re-replication** — a cluster of its own (E=Qw=Qa=2 on three nodes, ``--segment-mb`` MB
ledgers, ``--grace-s`` re-replication grace) takes ``--rereplicate-mb`` MB in messages of
``--rereplicate-message-bytes``. The broker is then restarted, which closes the open ledger:
the auditor copies closed ledgers only (an open one once it rolls), so this way every ledger
counts. kill -9 of the node holding the most; timed from the kill to no ledger naming it
(the segment list in ZooKeeper) with the broker listing nothing under-replicated
(``GET /admin/v2/storage-nodes/under-replicated``). The broker notices the node is gone when
its ZooKeeper session expires (10 s), then waits the grace period: "detected" is when the
broker first lists it; MB/s counts the stored bytes of the ledgers that named it.

Goals (the issue's): replicated publish ≥ 0.5× standalone throughput, p99 ≤ 2× standalone's.

Run: ``PYTHONPATH=. .venv/bin/python bench/cluster.py [--messages N] [--rereplicate-mb 1024]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import os
import shutil
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import confluent_kafka
import pulsar

from bench.common import (
    MB,
    RESULTS_DIR,
    fmt_ms,
    fmt_rate,
    machine_info,
    make_workdir,
    process_cpu_seconds,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from bench.pulsar_protocol import AckRecorder, Latencies, producer_options, run_paced
from magnetar.cluster.replicated import ROOT as LEDGERS_ROOT
from magnetar.cluster.replicated import Ledger
from magnetar.meta import MetadataStore
from magnetar.meta.factory import open_store
from magnetar.testing.cluster import StorageNodeProcess, broker
from magnetar.testing.server import StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess

NAMESPACE = "public/default"
STANDALONE = "standalone"
CLUSTERS = {"E=Qw=Qa=2": (2, 2, 2), "E=Qw=3, Qa=2": (3, 3, 2)}  # name → E, Qw, Qa
NODES = 3
THROUGHPUT_GOAL_RATIO = 0.5  # replicated msgs/s ≥ this × standalone's
LATENCY_GOAL_RATIO = 2.0  # replicated p99 ≤ this × standalone's
UNDER_REPLICATED = "/admin/v2/storage-nodes/under-replicated"
POLL_S = 0.2


# -- figures --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publish:
    """One throughput phase on one system."""

    messages: int
    seconds: float
    latency: Latencies  # sampled send → ack
    cpu: dict[str, float]  # CPU seconds during the phase: "client", "server", "node0", …

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("nan")

    def cpu_pct(self, who: str) -> float:
        return 100 * self.cpu[who] / self.seconds

    @property
    def server_us_per_msg(self) -> float:
        """CPU of every server process (broker and storage nodes) per message, µs."""
        return 1e6 * sum(v for k, v in self.cpu.items() if k != "client") / self.messages


@dataclass(frozen=True, slots=True)
class Paced:
    rate: float  # msgs/s actually sent
    latency: Latencies  # every message, send → ack


@dataclass(slots=True)
class CpuWatch:
    """Wall time and the CPU time of some processes, and of this one, over one phase."""

    pids: dict[str, int]
    wall: float = field(default_factory=time.perf_counter)
    start: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.start = self._now()

    def _now(self) -> dict[str, float]:
        cpu = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        return {**cpu, "client": time.process_time()}

    def stop(self, messages: int, latency: Latencies) -> Publish:
        seconds, now = time.perf_counter() - self.wall, self._now()
        return Publish(messages, seconds, latency, {k: now[k] - self.start[k] for k in now})


@dataclass
class System:
    """One system under test, running: its server (standalone or broker), its storage nodes,
    and a pulsar-client connected to it."""

    name: str
    server: StandaloneProcess
    nodes: list[StorageNodeProcess]
    client: Any = None

    @property
    def pids(self) -> dict[str, int]:
        procs = {"server": self.server, **{f"node{i}": n for i, n in enumerate(self.nodes)}}
        return {k: p.proc.pid for k, p in procs.items() if p.proc is not None}


# -- the workload ---------------------------------------------------------------------------


def pulsar_publish(system: System, args: argparse.Namespace, topic: str) -> Publish:
    producer = system.client.create_producer(_pulsar(topic), **producer_options(args))
    recorder = AckRecorder(producer, args.messages, args.sample_every)
    payload = b"m" * args.message_bytes
    watch = CpuWatch(system.pids)
    for _ in range(args.messages):
        recorder.send(payload)
    result = watch.stop(args.messages, recorder.wait(args.timeout))
    producer.close()
    return result


def pulsar_paced(system: System, args: argparse.Namespace, topic: str) -> Paced:
    producer = system.client.create_producer(_pulsar(topic), **producer_options(args))
    recorder = AckRecorder(producer, int(args.paced_rate * args.paced_seconds), 1)
    payload = b"p" * args.message_bytes

    def send(n: int) -> None:
        for _ in range(n):
            recorder.send(payload)

    rate = run_paced(args.paced_rate, args.paced_seconds, send)
    result = Paced(rate, recorder.wait(args.timeout))
    producer.close()
    return result


def kafka_produce(system: System, args: argparse.Namespace, topic: str) -> Publish:
    bootstrap = f"127.0.0.1:{system.server.kafka_port}"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    )
    producer.produce(topic, b"warm-up")  # the topic is created and its metadata fetched
    producer.flush(args.timeout)
    latencies: list[float] = []
    failed: list[object] = []

    def on_ack(sent_at: float, err: object, _msg: object) -> None:
        latencies.append(time.perf_counter() - sent_at)
        if err is not None:
            failed.append(err)

    payload, n = b"k" * args.message_bytes, args.messages
    watch = CpuWatch(system.pids)
    for i in range(n):
        timed = i % args.sample_every == 0 or i == n - 1
        callback = functools.partial(on_ack, time.perf_counter()) if timed else None
        while True:
            try:
                producer.produce(topic, payload, on_delivery=callback)
                break
            except BufferError:  # the client's queue is full: let it drain
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(args.timeout) != 0:
        raise RuntimeError(f"confluent-kafka did not deliver everything within {args.timeout} s")
    if failed:
        raise RuntimeError(f"{len(failed)} timed Kafka sends failed: {failed[0]}")
    return watch.stop(n, Latencies.of(latencies))


def _pulsar(topic: str) -> str:
    return f"persistent://{NAMESPACE}/{topic}"


PHASES: dict[str, Callable[[System, argparse.Namespace, str], Publish | Paced]] = {
    "publish": pulsar_publish,
    "paced": pulsar_paced,
    "produce": kafka_produce,
}


def run_rounds(systems: Sequence[System], args: argparse.Namespace) -> dict[str, dict[str, list]]:
    """Every phase on every system in turn, ``--rounds`` times; a fresh topic each time."""
    figures: dict[str, dict[str, list]] = {s.name: {p: [] for p in PHASES} for s in systems}
    for r in range(args.rounds):
        for phase, run in PHASES.items():
            for system in systems:
                figure = run(system, args, f"bench-cluster-{phase}-{r}")
                figures[system.name][phase].append(figure)
                print(f"round {r + 1} {phase:8} {system.name:13} {describe(figure)}", flush=True)
    return figures


def describe(figure: Publish | Paced) -> str:
    if isinstance(figure, Paced):
        lat = figure.latency
        return f"{figure.rate:,.0f} msgs/s, p50 {fmt_ms(lat.p50)} ms, p99 {fmt_ms(lat.p99)} ms"
    cpu = ", ".join(f"{k} {figure.cpu_pct(k):.0f} %" for k in figure.cpu)
    return (
        f"{figure.msgs_per_s:,.0f} msgs/s, p99 {fmt_ms(figure.latency.p99)} ms (CPU {cpu}; "
        f"load {os.getloadavg()[0]:.1f})"
    )


# -- the systems ----------------------------------------------------------------------------


def start_systems(
    stack: contextlib.ExitStack, workdir: Path, zookeeper: ZooKeeperProcess
) -> list[System]:
    standalone = StandaloneProcess(workdir / STANDALONE, ["--fsync", "always"])
    systems = [System(STANDALONE, standalone, [])]
    stack.enter_context(standalone)
    for i, (name, quorum) in enumerate(CLUSTERS.items()):
        server, nodes = start_cluster(stack, zookeeper, workdir / f"cluster{i}", quorum, [])
        systems.append(System(name, server, nodes))
    logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    for system in systems:
        system.client = pulsar.Client(system.server.pulsar_url, logger=logger)
        stack.callback(system.client.close)
        print(f"{system.name}: {system.pids} on {system.server.pulsar_url}", flush=True)
    return systems


def start_cluster(
    stack: contextlib.ExitStack,
    zookeeper: ZooKeeperProcess,
    root: Path,
    quorum: tuple[int, int, int],
    extra: Sequence[str],
) -> tuple[StandaloneProcess, list[StorageNodeProcess]]:
    """Three storage nodes and a broker under a ZooKeeper chroot of their own."""
    url = zookeeper.url(f"/{root.name}")
    nodes = [
        StorageNodeProcess(root / f"node{i}", ["--fsync", "always"], metadata_url=url)
        for i in range(NODES)
    ]
    for node in nodes:
        stack.enter_context(node)
    e, qw, qa = (str(q) for q in quorum)
    flags = ["--ensemble-size", e, "--write-quorum", qw, "--ack-quorum", qa, *extra]
    server = broker(root / "broker", url, *flags)
    stack.enter_context(server)
    return server, nodes


# -- re-replication -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rereplication:
    written_bytes: int  # message payload written
    write_seconds: float
    ledgers: int
    lost_ledgers: int  # ledgers naming the killed node
    lost_bytes: int  # their stored bytes: what had to be copied
    detected_s: float  # kill → the broker lists them under-replicated
    restored_s: float  # kill → no ledger names the node, nothing listed
    fragments: int  # as the broker counts them
    entries: int

    @property
    def copy_mb_s(self) -> float:
        return self.lost_bytes / MB / (self.restored_s - self.detected_s)

    @property
    def overall_mb_s(self) -> float:
        return self.lost_bytes / MB / self.restored_s


class LedgerList:
    """The segment list of one partition as the brokers keep it in ZooKeeper (read only)."""

    def __init__(self, metadata_url: str, partition: str) -> None:
        self.runner = asyncio.Runner()
        self.store: MetadataStore = self.runner.run(_open(metadata_url))
        self.path = f"{LEDGERS_ROOT}/{quote(partition, safe='')}"  # ReplicatedStorage's key

    def read(self) -> list[Ledger]:
        node = self.runner.run(self.store.get(self.path))
        return [Ledger.from_json(d) for d in json.loads(node.value)["ledgers"]] if node else []

    def close(self) -> None:
        self.runner.run(self.store.aclose())
        self.runner.close()


async def _open(url: str) -> MetadataStore:
    return open_store(url)


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


def write_bulk(server: StandaloneProcess, args: argparse.Namespace, topic: str) -> Publish:
    """``--rereplicate-mb`` MB through pulsar-client, every message acknowledged."""
    size = args.rereplicate_message_bytes
    count = args.rereplicate_mb * MB // size
    logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    client = pulsar.Client(server.pulsar_url, logger=logger)
    try:
        producer = client.create_producer(
            _pulsar(topic),
            batching_enabled=True,  # batches of up to 128 KB (the client's default bound)
            batching_max_publish_delay_ms=args.batch_delay_ms,
            block_if_queue_full=True,
        )
        recorder, payload = AckRecorder(producer, count, 1), os.urandom(size)
        watch = CpuWatch({})
        for _ in range(count):
            recorder.send(payload)
        return watch.stop(count, recorder.wait(args.timeout))
    finally:
        client.close()


def rereplicate(
    args: argparse.Namespace, workdir: Path, zookeeper: ZooKeeperProcess
) -> Rereplication:
    """Write, restart the broker (every ledger closed), kill the fullest node, time the copy."""
    root, topic = workdir / "rereplication", "bench-rereplicate"
    url = zookeeper.url(f"/{root.name}")
    flags = ["--segment-max-bytes", str(args.segment_mb * MB)]
    flags += ["--rereplication-grace-s", str(args.grace_s)]
    with contextlib.ExitStack() as stack:
        first, nodes = start_cluster(stack, zookeeper, root, (2, 2, 2), flags)
        written = write_bulk(first, args, topic)
        print(f"re-replication: {written.seconds:.1f} s to write {args.rereplicate_mb:,} MB")
        first.stop()  # a clean stop closes the open ledger
        second = broker(root / "broker1", url, *flags)
        stack.enter_context(second)
        http_json(f"{second.http_url}/admin/v2/persistent/{NAMESPACE}/{topic}/internalStats")
        ledger_list = LedgerList(url, f"{NAMESPACE}/{topic}")  # the broker has loaded it
        stack.callback(ledger_list.close)
        ledgers = ledger_list.read()
        victim = max(nodes, key=lambda n: sum(lg.info.size for lg in named_by(ledgers, n)))
        lost = named_by(ledgers, victim)
        states = ", ".join(sorted({lg.info.state.value for lg in ledgers}))
        print(
            f"re-replication: {len(ledgers)} ledgers ({states}); kill -9 {victim.node_id}, ", end=""
        )
        print(f"named by {len(lost)} of them", flush=True)
        victim.kill()
        detected, restored, state = await_restored(second, ledger_list, victim, args.timeout)
    return Rereplication(
        written.messages * args.rereplicate_message_bytes,
        written.seconds,
        len(ledgers),
        len(lost),
        sum(lg.info.size for lg in lost),
        detected,
        restored,
        state["fragmentsCopied"],
        state["entriesCopied"],
    )


def named_by(ledgers: Sequence[Ledger], node: StorageNodeProcess) -> list[Ledger]:
    """The ledgers with a fragment on ``node``."""
    return [lg for lg in ledgers if node.node_id in {n for _, ns in lg.ensembles for n in ns}]


def await_restored(
    server: StandaloneProcess, ledger_list: LedgerList, victim: StorageNodeProcess, timeout: float
) -> tuple[float, float, dict[str, Any]]:
    """Seconds from now until the broker lists ledgers as under-replicated, and until none is
    listed and no ledger names ``victim``; with the broker's last progress report."""
    start, detected = time.perf_counter(), float("nan")
    while True:
        state = http_json(server.http_url + UNDER_REPLICATED)
        elapsed = time.perf_counter() - start
        if detected != detected and (state["ledgers"] or state["fragmentsCopied"]):
            detected = elapsed
        if not state["ledgers"] and not named_by(ledger_list.read(), victim):
            return detected, elapsed, state
        if elapsed > timeout:
            raise RuntimeError(f"{victim.node_id}'s ledgers not re-replicated within {timeout} s")
        time.sleep(POLL_S)  # another process's progress: there is no event to wait on


# -- report ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """One system's figures, medians over the rounds."""

    name: str
    publish: float  # msgs/s, pulsar-client
    publish_p50: float  # seconds, saturated (sampled)
    publish_p99: float
    paced_rate: float
    paced_p50: float
    paced_p99: float
    produce: float  # msgs/s, confluent-kafka
    produce_p99: float
    publish_cpu_us: float  # CPU of the server processes per message
    produce_cpu_us: float
    publish_cpu_pct: dict[str, float]  # per process, 100 = one core

    @classmethod
    def of(cls, name: str, figures: dict[str, list]) -> Summary:
        pub, paced, prod = figures["publish"], figures["paced"], figures["produce"]
        med = statistics.median
        return cls(
            name,
            med(p.msgs_per_s for p in pub),
            med(p.latency.p50 for p in pub),
            med(p.latency.p99 for p in pub),
            med(p.rate for p in paced),
            med(p.latency.p50 for p in paced),
            med(p.latency.p99 for p in paced),
            med(p.msgs_per_s for p in prod),
            med(p.latency.p99 for p in prod),
            med(p.server_us_per_msg for p in pub),
            med(p.server_us_per_msg for p in prod),
            {k: med(p.cpu_pct(k) for p in pub) for k in pub[0].cpu},
        )


@dataclass(frozen=True, slots=True)
class Goal:
    system: str
    measure: str
    ratio: float  # the replicated system's figure ÷ the standalone's
    at_most: bool  # a latency: ratio <= limit; else a rate: ratio >= limit

    @property
    def limit(self) -> float:
        return LATENCY_GOAL_RATIO if self.at_most else THROUGHPUT_GOAL_RATIO

    @property
    def met(self) -> bool:
        return self.ratio <= self.limit if self.at_most else self.ratio >= self.limit

    @property
    def text(self) -> str:
        bound = "<=" if self.at_most else ">="
        return (
            f"{self.system}: {self.measure} {bound} {self.limit:g}x standalone ({self.ratio:.2f}x)"
        )


def micros(value: float) -> str:
    return f"{value:.2f}"


# (label, Summary field, format, goal: "rate" / "latency" / None)
MEASURES: list[tuple[str, str, Callable[[float], str], str | None]] = [
    ("publish msgs/s (pulsar-client)", "publish", fmt_rate, "rate"),
    ("publish p50 ms (paced)", "paced_p50", fmt_ms, None),
    ("publish p99 ms (paced)", "paced_p99", fmt_ms, "latency"),
    ("publish p50 ms (saturated)", "publish_p50", fmt_ms, None),
    ("publish p99 ms (saturated)", "publish_p99", fmt_ms, None),
    ("produce msgs/s (confluent-kafka, acks=all)", "produce", fmt_rate, "rate"),
    ("produce p99 ms (saturated)", "produce_p99", fmt_ms, None),
    ("server CPU µs/msg, publish (all processes)", "publish_cpu_us", micros, None),
    ("server CPU µs/msg, produce (all processes)", "produce_cpu_us", micros, None),
]


def goals_of(summaries: Sequence[Summary]) -> list[Goal]:
    base, replicated = summaries[0], summaries[1:]
    return [
        Goal(s.name, label, getattr(s, attr) / getattr(base, attr), kind == "latency")
        for label, attr, _, kind in MEASURES
        if kind is not None
        for s in replicated
    ]


def table_rows(summaries: Sequence[Summary], goals: Sequence[Goal]) -> list[list[str]]:
    base = summaries[0]
    rows = []
    for label, attr, show, kind in MEASURES:
        row = [label, show(getattr(base, attr))]
        for s in summaries[1:]:
            row += [show(getattr(s, attr)), f"{getattr(s, attr) / getattr(base, attr):.2f}x"]
        judged = [g for g in goals if g.measure == label]
        bound = (
            f"<= {LATENCY_GOAL_RATIO:g}x" if kind == "latency" else f">= {THROUGHPUT_GOAL_RATIO:g}x"
        )
        verdicts = " / ".join("MET" if g.met else "NOT MET" for g in judged)
        rows.append(row + ([bound, verdicts] if judged else ["", ""]))
    return rows


def headers(summaries: Sequence[Summary]) -> list[str]:
    out = ["measure", summaries[0].name]
    for s in summaries[1:]:
        out += [s.name, "ratio"]
    return [*out, "goal", "verdict"]


RR_HEADERS = [
    "data MB",
    "write MB/s",
    "ledgers",
    "on the killed node",
    "its MB",
    "detected s",
    "restored s",
    "copy MB/s",
    "kill → restored MB/s",
    "entries copied",
]


def rereplication_row(rr: Rereplication) -> list[str]:
    return [
        f"{rr.written_bytes / MB:,.0f}",
        f"{rr.written_bytes / MB / rr.write_seconds:,.1f}",
        str(rr.ledgers),
        str(rr.lost_ledgers),
        f"{rr.lost_bytes / MB:,.0f}",
        f"{rr.detected_s:.1f}",
        f"{rr.restored_s:.1f}",
        f"{rr.copy_mb_s:,.1f}",
        f"{rr.overall_mb_s:,.1f}",
        f"{rr.entries:,}",
    ]


def print_report(
    summaries: Sequence[Summary],
    goals: Sequence[Goal],
    rr: Rereplication | None,
    args: argparse.Namespace,
) -> None:
    render = render_markdown_table if args.markdown else render_table
    print(
        f"\n{args.messages:,} messages of {args.message_bytes} B per throughput phase, paced "
        f"{args.paced_rate:,.0f} msgs/s for {args.paced_seconds:g} s; medians of {args.rounds} "
        f"round(s)"
    )
    for s in summaries:
        cpu = ", ".join(f"{k} {v:.0f} %" for k, v in s.publish_cpu_pct.items())
        print(f"CPU during publish, {s.name} (100 % = one core): {cpu}")
    print()
    print(render(headers(summaries), table_rows(summaries, goals)))
    if rr is not None:
        print(
            f"\nre-replication: E=Qw=Qa=2 on {NODES} nodes, {args.segment_mb} MB ledgers, "
            f"{args.rereplicate_message_bytes:,} B messages, grace {args.grace_s:g} s"
        )
        print(render(RR_HEADERS, [rereplication_row(rr)]))
    print()
    for goal in goals:
        print(f"goal {'MET' if goal.met else 'NOT MET'}: {goal.text}")


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=200_000, help="per throughput phase")
    p.add_argument("--message-bytes", type=int, default=100, help="size of every message")
    p.add_argument("--rounds", type=int, default=3, help="every phase on every system, N times")
    p.add_argument("--batch-messages", type=int, default=1000, help="producer batch size")
    p.add_argument("--batch-delay-ms", type=int, default=1, help="producer batch delay")
    p.add_argument("--max-pending", type=int, default=100_000, help="producer queue bound")
    p.add_argument("--sample-every", type=int, default=100, help="time 1 in N saturated sends")
    p.add_argument("--paced-rate", type=float, default=5000, help="paced phase msgs/s")
    p.add_argument("--paced-seconds", type=float, default=5, help="paced phase length")
    p.add_argument("--rereplicate-mb", type=int, default=256, help="data re-replicated (0: skip)")
    p.add_argument("--rereplicate-message-bytes", type=int, default=10_000)
    p.add_argument("--segment-mb", type=int, default=64, help="ledger size in the copy phase")
    p.add_argument("--grace-s", type=float, default=2, help="--rereplication-grace-s")
    p.add_argument("--timeout", type=float, default=300, help="give up a phase after S")
    p.add_argument("--dir", type=Path, help="where data goes (default: the temp dir if on disk)")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "cluster.json")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = p.parse_args(argv)
    counts = ("messages", "message_bytes", "rounds", "batch_messages", "sample_every")
    if min(getattr(args, name) for name in counts) < 1:
        p.error("--" + ", --".join(n.replace("_", "-") for n in counts) + " must be >= 1")
    return args


@contextlib.contextmanager
def workdir_for(requested: Path | None) -> Iterator[tuple[Path, Any]]:
    workdir, fs = make_workdir(requested, prefix="magnetar-cluster-bench-")
    print(f"{utc_now()}  {machine_info()}  dir={workdir} ({fs.fstype} on {fs.device})")
    try:
        yield workdir, fs
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started, load_start = utc_now(), os.getloadavg()
    with workdir_for(args.dir) as (workdir, fs), ZooKeeperProcess(workdir / "zookeeper") as zk:
        with contextlib.ExitStack() as stack:
            systems = start_systems(stack, workdir, zk)
            figures = run_rounds(systems, args)
        rr = rereplicate(args, workdir, zk) if args.rereplicate_mb > 0 else None
    summaries = [Summary.of(name, f) for name, f in figures.items()]
    goals = goals_of(summaries)
    print_report(summaries, goals, rr, args)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    versions = {p: importlib.metadata.version(p) for p in ("pulsar-client", "confluent-kafka")}
    report = {
        "benchmark": "cluster",
        "started": started,
        "command": " ".join(["bench/cluster.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "filesystem": dataclasses.asdict(fs),
        "config": {**config, "clients": versions, "quorums": CLUSTERS},
        "results": [dataclasses.asdict(s) for s in summaries],
        "rounds": {
            name: {p: [_plain(x) for x in xs] for p, xs in f.items()} for name, f in figures.items()
        },
        "rereplication": None
        if rr is None
        else {**dataclasses.asdict(rr), "copy_mb_s": rr.copy_mb_s, "overall_mb_s": rr.overall_mb_s},
        "goals": [{**dataclasses.asdict(g), "limit": g.limit, "met": g.met} for g in goals],
        "load_average": {"start": load_start, "end": os.getloadavg()},
    }
    write_json(args.json, report)
    print(f"\nwrote {args.json}")
    return 0


def _plain(figure: Publish | Paced) -> dict[str, Any]:
    out = dataclasses.asdict(figure)
    if isinstance(figure, Publish):
        out["msgs_per_s"] = figure.msgs_per_s
    return out


if __name__ == "__main__":
    raise SystemExit(main())
