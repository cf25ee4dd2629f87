"""Transactional produce next to idempotent (non-transactional) produce, same server, same
run (issue 17: goal transactional >= 0.5x).

confluent-kafka producers send ``--messages`` values of ``--size`` bytes to a topic of
``--partitions`` partitions. The peer is an idempotent producer (what a transactional one
is, minus the transactions); the transactional one commits every ``--txn-size`` messages
(begin, produce, commit: AddPartitionsToTxn, the batches, EndTxn with its markers). Rounds
alternate the two; the figure is the median msgs/s over ``--rounds``. A read_committed
consumer then reads the transactional topic to the end and must see every committed message.

Run: ``PYTHONPATH=. .venv/bin/python bench/kafka_txn.py [--messages 200000]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid
from collections.abc import Sequence

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    RESULTS_DIR,
    fmt_rate,
    machine_info,
    make_workdir,
    render_table,
    utc_now,
    write_json,
)
from magnetar.testing.server import StandaloneProcess

TIMEOUT_S = 120.0


def _config(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000}  # fmt: skip


def _produce(producer: confluent_kafka.Producer, topic: str, value: bytes, n: int) -> None:
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)


def plain_round(bootstrap: str, topic: str, args: argparse.Namespace) -> float:
    producer = confluent_kafka.Producer(_config(bootstrap))
    value = b"x" * args.size
    started = time.perf_counter()
    _produce(producer, topic, value, args.messages)
    assert producer.flush(TIMEOUT_S) == 0, "messages left unsent"
    return args.messages / (time.perf_counter() - started)


def txn_round(bootstrap: str, topic: str, args: argparse.Namespace) -> float:
    config = {**_config(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"}
    producer = confluent_kafka.Producer(config)
    producer.init_transactions(TIMEOUT_S)
    value = b"x" * args.size
    started = time.perf_counter()
    left = args.messages
    while left > 0:
        n = min(args.txn_size, left)
        producer.begin_transaction()
        _produce(producer, topic, value, n)
        producer.commit_transaction(TIMEOUT_S)
        left -= n
    return args.messages / (time.perf_counter() - started)


def read_committed(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    seen, at_end = 0, set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is None:
                    seen += 1
                    at_end.discard(m.partition())
                elif m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
    finally:
        consumer.close()
    return seen


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--txn-size", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir, _ = make_workdir(None, prefix="magnetar-txn-bench-")
    rates: dict[str, list[float]] = {"idempotent": [], "transactional": []}
    with StandaloneProcess(workdir / "data") as server:  # removed after
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        plain, txn = (f"bench-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("plain", "txn"))
        for topic in (plain, txn):
            admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
        for _ in range(args.rounds):
            rates["idempotent"].append(plain_round(bootstrap, plain, args))
            rates["transactional"].append(txn_round(bootstrap, txn, args))
        committed = read_committed(bootstrap, txn, args.partitions)
    shutil.rmtree(workdir, ignore_errors=True)
    median = {k: statistics.median(v) for k, v in rates.items()}
    ratio = median["transactional"] / median["idempotent"]
    print(
        f"{args.messages} x {args.size} B per round, {args.partitions} partitions, "
        f"transactions of {args.txn_size}, {args.rounds} rounds (median)"
    )
    rows = [[k, fmt_rate(median[k]), " ".join(fmt_rate(r) for r in v)] for k, v in rates.items()]
    print(render_table(["producer", "msgs/s", "rounds"], rows))
    print(f"transactional / idempotent: {ratio:.2f}x (goal >= 0.5x)")
    expected = args.messages * args.rounds
    print(f"read_committed consumer read {committed} of {expected} committed messages")
    write_json(
        RESULTS_DIR / "kafka_txn.json",
        {
            "when": utc_now(),
            "machine": machine_info(),
            "args": vars(args),
            "rates": rates,
            "ratio": ratio,
            "read_committed": committed,
        },
    )
    return 0 if committed == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
