"""Consumer-group rebalance time: KIP-848 (``group.protocol=consumer``) next to the classic
protocol, same server, same run (issue 23 item 7).

A group of ``--members`` confluent-kafka consumers on a topic of ``--partitions``
partitions. Each round measures, per protocol:

- **join**: from the last member's ``subscribe`` until every member owns its share (all
  partitions owned, counts differing by at most one);
- **leave**: from one member's ``close`` until the others own everything again.

The classic members use librdkafka's defaults except ``heartbeat.interval.ms`` and
``session.timeout.ms`` (``--heartbeat-ms``, 10x for the session), and the ``range``
assignor (eager: every member gives everything up on each rebalance); the KIP-848 members
get the same heartbeat interval from the server (``--group-consumer-heartbeat-interval-ms``).
Figures are p50 / max over ``--rounds``.

Run: ``PYTHONPATH=. .venv/bin/python bench/kafka_groups.py [--rounds 5]``
"""

from __future__ import annotations

import argparse
import shutil
import time
import uuid
from collections.abc import Callable, Sequence

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

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

TIMEOUT_S = 60.0


def _consumer(
    bootstrap: str, group: str, protocol: str, heartbeat_ms: int
) -> confluent_kafka.Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol}
    if protocol == "classic":
        config.update(
            {
                "heartbeat.interval.ms": heartbeat_ms,
                "session.timeout.ms": max(6000, 10 * heartbeat_ms),
                "partition.assignment.strategy": "range",
            }
        )
    return confluent_kafka.Consumer(config)


def _balanced(members: list[confluent_kafka.Consumer], partitions: int) -> bool:
    owned = [len(c.assignment()) for c in members]
    return sum(owned) == partitions and max(owned) - min(owned) <= 1 and min(owned) > 0


def _poll_until(members: list[confluent_kafka.Consumer], done: Callable[[], bool]) -> float:
    started = time.perf_counter()
    while not done():
        if time.perf_counter() - started > TIMEOUT_S:
            raise TimeoutError("the group did not settle")
        for c in members:
            c.poll(0.01)
    return time.perf_counter() - started


def round_(
    bootstrap: str, topic: str, protocol: str, args: argparse.Namespace
) -> tuple[float, float]:
    group = f"bench-{protocol}-{uuid.uuid4().hex[:6]}"
    members = [
        _consumer(bootstrap, group, protocol, args.heartbeat_ms) for _ in range(args.members)
    ]
    try:
        for c in members[:-1]:
            c.subscribe([topic])
        _poll_until(members[:-1], lambda: _balanced(members[:-1], args.partitions))
        members[-1].subscribe([topic])
        join = _poll_until(members, lambda: _balanced(members, args.partitions))
        leaving = members.pop(0)
        started = time.perf_counter()
        leaving.close()
        _poll_until(members, lambda: _balanced(members, args.partitions))
        return join, time.perf_counter() - started
    finally:
        for c in members:
            c.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, _ = make_workdir(None, prefix="magnetar-groups-bench-")
    extra = ["--group-consumer-heartbeat-interval-ms", str(args.heartbeat_ms),
             "--group-min-session-timeout-ms", "1000"]  # fmt: skip
    results: dict[str, dict[str, list[float]]] = {}
    with StandaloneProcess(workdir / "data", extra_args=extra) as server:  # removed after
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"bench-groups-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
        for protocol in ("classic", "consumer"):
            runs = [round_(bootstrap, topic, protocol, args) for _ in range(args.rounds)]
            results[protocol] = {"join_s": [j for j, _ in runs], "leave_s": [lv for _, lv in runs]}
    shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    for protocol, r in results.items():
        rows.append(
            [
                protocol,
                f"{percentile(r['join_s'], 50) * 1000:.0f}",
                f"{max(r['join_s']) * 1000:.0f}",
                f"{percentile(r['leave_s'], 50) * 1000:.0f}",
                f"{max(r['leave_s']) * 1000:.0f}",
            ]
        )
    print(
        f"{args.members} confluent-kafka members, {args.partitions} partitions, heartbeat "
        f"{args.heartbeat_ms} ms, {args.rounds} rounds"
    )
    print(
        render_table(
            ["protocol", "join p50 ms", "join max ms", "leave p50 ms", "leave max ms"], rows
        )
    )
    write_json(
        RESULTS_DIR / "kafka_groups.json",
        {"when": utc_now(), "machine": machine_info(), "args": vars(args), "results": results},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
