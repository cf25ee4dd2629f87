"""A consumer-group member in its own process, so a test can SIGKILL it.

Usage: python group_member.py BOOTSTRAP TOPIC GROUP. Prints ``assigned P,P,...`` on each
assignment and ``committed P O`` once the commit of record (P, O) has succeeded (a commit is
synchronous, one per record). SIGTERM closes the consumer cleanly (LeaveGroup).
"""

from __future__ import annotations

import signal
import sys

import confluent_kafka


def main() -> None:
    bootstrap, topic, group = sys.argv[1:4]
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 300,
            "max.poll.interval.ms": 10000,
        }
    )
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    def on_assign(c: confluent_kafka.Consumer, parts: list[confluent_kafka.TopicPartition]) -> None:
        print("assigned " + ",".join(str(p.partition) for p in parts), flush=True)

    consumer.subscribe([topic], on_assign=on_assign)
    while not stop:
        msg = consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        try:
            consumer.commit(message=msg, asynchronous=False)
        except confluent_kafka.KafkaException:
            continue  # not committed (rebalance): whoever owns the partition next redoes it
        print(f"committed {msg.partition()} {msg.offset()}", flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
