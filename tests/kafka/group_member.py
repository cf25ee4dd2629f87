"""A consumer-group member in its own process, so a test can SIGKILL it.

Usage: python group_member.py BOOTSTRAP TOPIC GROUP [classic|consumer] (the group protocol;
classic by default; with ``consumer`` (KIP-848) the server's settings give the session
timeout and heartbeat interval, as Kafka's do). Prints ``assigned P,P,...`` (all it owns
now) on each assignment and revocation, and ``committed P O`` once the commit of record
(P, O) has succeeded (a commit is synchronous, one per record). SIGTERM closes the consumer
cleanly (LeaveGroup).
"""

from __future__ import annotations

import signal
import sys

import confluent_kafka


def main() -> None:
    bootstrap, topic, group = sys.argv[1:4]
    protocol = sys.argv[4] if len(sys.argv) > 4 else "classic"
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "max.poll.interval.ms": 10000,
    }
    if protocol == "classic":
        config.update({"session.timeout.ms": 3000, "heartbeat.interval.ms": 300})
    else:
        config["group.protocol"] = protocol
    consumer = confluent_kafka.Consumer(config)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    incremental = protocol == "consumer"

    def report(c: confluent_kafka.Consumer) -> None:
        print("assigned " + ",".join(str(p.partition) for p in c.assignment()), flush=True)

    def on_assign(c: confluent_kafka.Consumer, parts: list[confluent_kafka.TopicPartition]) -> None:
        # KIP-848 rebalances are incremental: the callback names what is added
        if incremental:
            c.incremental_assign(parts)
        else:
            c.assign(parts)
        report(c)

    def on_revoke(c: confluent_kafka.Consumer, parts: list[confluent_kafka.TopicPartition]) -> None:
        if incremental:
            c.incremental_unassign(parts)
            report(c)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
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
