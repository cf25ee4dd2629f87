"""Several brokers on one ZooKeeper and one set of storage nodes: a topic is served by the
broker owning its bundle; when that broker dies, another takes the bundle, recovers the
topic's ledger and serves it, with nothing acknowledged lost and nothing duplicated."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pulsar
import pytest
import requests

from magnetar.broker.ownership import bundle_of
from magnetar.core.names import TopicName
from magnetar.testing.cluster import topic_where
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replicated_ledgers import (
    KafkaPublisher,
    Publisher,
    check_history,
    consume_all,
    read_all,
)

pytestmark = pytest.mark.slow
TOPIC = "persistent://public/default/failover"
ADMIN = [sys.executable, "-m", "magnetar.cli", "admin", "--url"]


@pytest.fixture
def two_brokers(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Cluster:
    url = zookeeper.url(f"/brokers-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    for _ in range(3):
        cluster.add_node()
    cluster.add_broker()
    cluster.add_broker()
    return cluster


def _kafka_topic_beside(topic: str) -> str:
    """A Kafka topic name in the same bundle as ``topic``: served by the same broker."""
    want = bundle_of(TopicName.parse(topic))
    return topic_where("beside", lambda bundle: bundle == want)


class AckingConsumer:
    """A Shared consumer of a durable subscription, in a thread: receives and acknowledges
    everything, noting when each message was first acknowledged and what came again."""

    def __init__(self, url: str, topic: str, subscription: str) -> None:
        self.client = pulsar.Client(url, operation_timeout_seconds=10)
        self.consumer = self.client.subscribe(
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        self.received: set[bytes] = set()
        self.acked: set[bytes] = set()
        self.acked_at: dict[bytes, float] = {}
        self.redelivered: set[bytes] = set()
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop:
            try:
                message = self.consumer.receive(500)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException:
                time.sleep(0.1)  # reconnecting: the client retries on its own
                continue
            value = message.data()
            if value in self.received:
                self.redelivered.add(value)
            self.received.add(value)
            self.consumer.acknowledge(message)
            self.acked.add(value)
            self.acked_at.setdefault(value, time.monotonic())

    def start(self) -> AckingConsumer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self.thread.join(10)
        self.client.close()


def _owner(http_url: str, topic: str) -> str:
    path = topic.removeprefix("persistent://")
    return str(requests.get(f"{http_url}/lookup/v2/topic/persistent/{path}").json()["brokerUrl"])


def test_one_owner_per_topic_and_failover_loses_nothing(two_brokers: Cluster) -> None:
    cluster = two_brokers
    try:
        first, second = cluster.brokers
        listed = requests.get(f"{first.http_url}/admin/v2/brokers").json()
        assert len(listed) == 2
        assert (
            requests.post(
                f"{first.http_url}/admin/v2/namespaces/public/default/deduplication", json=True
            ).status_code
            == 204
        )
        service = f"{first.pulsar_url},{second.pulsar_url}".replace(",pulsar://", ",")
        bootstrap = f"127.0.0.1:{first.kafka_port},127.0.0.1:{second.kafka_port}"
        pub = Publisher(service, TOPIC).start()
        reader = AckingConsumer(service, TOPIC, "resume").start()
        kafka = KafkaPublisher(bootstrap, _kafka_topic_beside(TOPIC)).start()
        wait_for(lambda: len(pub.acked) >= 2000, 60, "2000 acknowledged messages")
        wait_for(lambda: len(kafka.acked) >= 2000, 60, "2000 acknowledged Kafka records")
        wait_for(lambda: len(reader.acked) >= 1000, 60, "1000 messages consumed")
        owner_url = _owner(first.http_url, TOPIC)
        assert owner_url == _owner(second.http_url, TOPIC), "two brokers disagree on the owner"
        owner = first if owner_url == first.pulsar_url else second
        survivor = second if owner is first else first
        stats = f"/admin/v2/persistent/{TOPIC.removeprefix('persistent://')}/stats"
        moved = requests.get(f"{survivor.http_url}{stats}", allow_redirects=False)
        assert moved.status_code == 307
        assert moved.headers["Location"] == f"{owner.http_url}{stats}"
        assert requests.get(f"{survivor.http_url}{stats}").json()["msgInCounter"] > 0
        owner.kill()
        killed_at, first_after = time.monotonic(), pub.sent + 1000  # beyond any queued send
        wait_for(lambda: pub.acked_from(first_after), 60, "publishing to resume elsewhere")
        failover = time.monotonic() - killed_at
        before, kafka_before = len(pub.acked), len(kafka.acked)
        wait_for(lambda: len(pub.acked) >= before + 2000, 60, "publishes on the new owner")
        wait_for(lambda: len(kafka.acked) >= kafka_before + 2000, 60, "Kafka on the new owner")
        pub.stop()
        kafka.stop()
        assert not kafka.failed, f"{len(kafka.failed)} Kafka records failed: {kafka.errors[:3]}"
        assert _owner(survivor.http_url, TOPIC) == survivor.pulsar_url
        got = read_all(survivor.pulsar_url, TOPIC, len(pub.acked))
        check_history(got, pub.acked)
        pub.close()
        check_history(consume_all(bootstrap, kafka.topic, len(kafka.acked)), kafka.acked)
        # the durable subscription resumes from its cursor on the new owner: it gets every
        # message, and again only what it acknowledged in the last moments before the kill
        # (acknowledgements the client had not sent, or the broker had not stored, yet)
        wait_for(lambda: pub.acked <= reader.received, 60, "the consumer to catch up")
        reader.stop()
        late = killed_at - 3
        again = {v for v in reader.redelivered if reader.acked_at.get(v, late) < late}
        assert not again, f"{len(again)} messages acknowledged well before the kill came back"
        print(f"failover: first acknowledged publish on the new owner {failover:.1f} s after kill")
    finally:
        cluster.stop()


def test_a_crashed_owner_is_replaced_before_its_session_ends(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """kill -9 of the owner with a 20 s ZooKeeper session: its port refuses connections, so
    the survivor takes its bundles at the next lookup instead of waiting for the session to
    expire (ownership's fast takeover). Pulsar and Kafka publishing resume while the dead
    broker is still registered; nothing acknowledged is lost or stored twice."""
    url = zookeeper.url(f"/crash-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=20000"
    cluster = Cluster(tmp_path, url)
    try:
        for _ in range(3):
            cluster.add_node()
        first, second = cluster.add_broker(), cluster.add_broker()
        http = f"{first.http_url}/admin/v2/namespaces/public/default/deduplication"
        assert requests.post(http, json=True).status_code == 204
        service = f"{first.pulsar_url},{second.pulsar_url}".replace(",pulsar://", ",")
        bootstrap = f"127.0.0.1:{first.kafka_port},127.0.0.1:{second.kafka_port}"
        pub = Publisher(service, TOPIC).start()
        kafka = KafkaPublisher(bootstrap, _kafka_topic_beside(TOPIC)).start()
        wait_for(lambda: len(pub.acked) >= 1000 and len(kafka.acked) >= 1000, 60, "publishing")
        owner = first if _owner(first.http_url, TOPIC) == first.pulsar_url else second
        survivor = second if owner is first else first
        owner.kill()
        first_after, kafka_before = pub.sent + 1000, len(kafka.acked)
        wait_for(lambda: pub.acked_from(first_after), 60, "Pulsar publishing to resume")
        wait_for(lambda: len(kafka.acked) > kafka_before + 1000, 60, "Kafka publishing to resume")
        registered = requests.get(f"{survivor.http_url}/admin/v2/brokers").json()
        assert len(registered) == 2, "resumed only once the dead broker's session had ended"
        assert any("before its session ends" in line for line in survivor.output)
        pub.stop()
        kafka.stop()
        assert not pub.failed and not kafka.failed, kafka.errors[:3]
        check_history(read_all(survivor.pulsar_url, TOPIC, len(pub.acked)), pub.acked)
        pub.close()
        check_history(consume_all(bootstrap, kafka.topic, len(kafka.acked)), kafka.acked)
    finally:
        cluster.stop()


def test_a_frozen_owner_is_replaced_and_acknowledges_nothing_after_it_wakes(
    two_brokers: Cluster,
) -> None:
    """SIGSTOP the owner past its session timeout; clients of the other broker take the
    topic over (fence, recover); SIGCONT: the old owner must not acknowledge a single write,
    and it drops its clients, who find the new owner."""
    cluster = two_brokers
    try:
        first, second = cluster.brokers
        client = pulsar.Client(first.pulsar_url, operation_timeout_seconds=10)
        producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=0)
        for i in range(50):
            producer.send(f"before-{i:03d}".encode())
        owner_url = _owner(first.http_url, TOPIC)
        zombie, survivor = (first, second) if owner_url == first.pulsar_url else (second, first)
        zombie.pause()
        time.sleep(5)  # past the 3 s session: ZooKeeper expires the zombie's ownership
        other = pulsar.Client(survivor.pulsar_url, operation_timeout_seconds=30)
        taker = other.create_producer(TOPIC, batching_enabled=False)
        for i in range(50):
            taker.send(f"after-{i:03d}".encode())
        assert _owner(survivor.http_url, TOPIC) == survivor.pulsar_url
        results: list[pulsar.Result] = []
        zombie.resume()
        producer.send_async(b"zombie-write", lambda r, _m: results.append(r))
        wait_for(
            lambda: any(
                "lost its ZooKeeper session" in line or "fenced" in line for line in zombie.output
            ),
            30,
            "the woken broker to notice it lost the topic",
        )
        got = read_all(survivor.pulsar_url, TOPIC, 100)
        before = [m for m in got if m.startswith(b"before-")]
        assert before == [f"before-{i:03d}".encode() for i in range(50)]
        assert [m for m in got if m.startswith(b"after-")] == [
            f"after-{i:03d}".encode() for i in range(50)
        ]
        # the zombie's write either failed or reached the new owner through a new lookup;
        # never stored by the zombie behind the new owner's back
        assert got.count(b"zombie-write") <= 1
        if pulsar.Result.Ok in results:
            assert (
                got.count(b"zombie-write") == 1
                or read_all(survivor.pulsar_url, TOPIC, 101).count(b"zombie-write") == 1
            )
        client.close()
        other.close()
    finally:
        cluster.stop()


def test_kafka_clients_follow_partition_leaders_across_brokers(two_brokers: Cluster) -> None:
    """Metadata lists both brokers and leads each partition from the broker owning it; a
    Kafka producer and consumer bootstrapped on either broker reach every partition."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = two_brokers
    try:
        first, second = cluster.brokers
        bootstrap = f"127.0.0.1:{first.kafka_port},127.0.0.1:{second.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("spread", num_partitions=8)])["spread"].result(30)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        acked: list[tuple[int, bytes]] = []

        def delivered(err: object, msg: confluent_kafka.Message) -> None:
            if err is None:
                acked.append((msg.partition(), msg.value()))

        for i in range(4000):
            producer.produce(
                "spread", f"v-{i:05d}".encode(), key=str(i).encode(), on_delivery=delivered
            )
            producer.poll(0)
        assert producer.flush(60) == 0
        assert len(acked) == 4000
        meta = admin.list_topics("spread", timeout=30)
        assert len(meta.brokers) == 2
        leaders = {p.leader for p in meta.topics["spread"].partitions.values()}
        assert len(leaders) == 2, f"every partition led by one broker: {leaders}"
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "spread-check",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([confluent_kafka.TopicPartition("spread", p, 0) for p in range(8)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(seen) < 4000 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        consumer.close()
        assert sorted(seen) == sorted(v for _, v in acked)
    finally:
        cluster.stop()


def test_unloading_a_namespace_under_load_hands_topics_over_cleanly(two_brokers: Cluster) -> None:
    import subprocess
    import sys

    from magnetar.testing.server import REPO

    cluster = two_brokers
    try:
        first, second = cluster.brokers
        path = f"{first.http_url}/admin/v2/namespaces/public/default"
        assert requests.post(f"{path}/deduplication", json=True).status_code == 204
        service = f"{first.pulsar_url},{second.pulsar_url}".replace(",pulsar://", ",")
        pub = Publisher(service, TOPIC).start()
        wait_for(lambda: len(pub.acked) >= 2000, 60, "2000 acknowledged messages")
        owners = requests.get(f"{path}/bundles").json()
        assert owners["numBundles"] == 4 and any(owners["bundles"].values())
        for _ in range(3):  # each time the bundle goes back to whichever lookup takes it
            out = subprocess.run(
                [sys.executable, "-m", "magnetar.cli", "admin", "--url", second.http_url,
                 "namespaces", "unload", "public/default"],
                capture_output=True, text=True, cwd=REPO, timeout=60,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            goal = len(pub.acked) + 1000
            wait_for(lambda g=goal: len(pub.acked) >= g, 60, "publishing after the unload")
        pub.stop()
        assert not pub.failed, f"{len(pub.failed)} publishes failed across unloads"
        got = read_all(service, TOPIC, len(pub.acked))
        check_history(got, pub.acked)
        pub.close()
        ledgers = cluster.ledgers(TOPIC)
        closed = [lg for lg in ledgers if lg["info"]["state"] == "CLOSED"]
        assert len(closed) >= 3, "each unload closes the ledger for the next owner"
        # ledger ids grow with offsets whichever broker wrote them: they are the ledger part
        # of message ids, which a reader compares (it drops what sorts before what it read)
        ids = [lg["info"]["segment_id"] for lg in ledgers]
        assert ids == sorted(ids), ids
    finally:
        cluster.stop()


def test_a_kafka_group_across_two_brokers_survives_one_dying(two_brokers: Cluster) -> None:
    """Three consumers of one group over two brokers: every message is consumed, and the
    group's committed offsets never go backwards, also when a broker (perhaps the
    coordinator, perhaps a partition owner) is killed and the group moves."""
    import threading

    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = two_brokers
    try:
        first, second = cluster.brokers
        bootstrap = f"127.0.0.1:{first.kafka_port},127.0.0.1:{second.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("grouped", num_partitions=6)])["grouped"].result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        sent = [f"g-{i:05d}".encode() for i in range(3000)]
        for i, value in enumerate(sent):  # every partition gets its share (no sticky luck)
            producer.produce("grouped", value, partition=i % 6)
            producer.poll(0)
        assert producer.flush(60) == 0
        seen: set[bytes] = set()
        commits: dict[int, list[int]] = {}
        failures: dict[int, list[str]] = {}  # partition → why its commits failed
        stop = threading.Event()
        lock = threading.Lock()

        def consume(n: int) -> None:
            c = confluent_kafka.Consumer(
                {"bootstrap.servers": bootstrap, "group.id": "three",
                 "auto.offset.reset": "earliest", "enable.auto.commit": False,
                 "session.timeout.ms": 6000, "client.id": f"c{n}"}
            )  # fmt: skip
            c.subscribe(["grouped"])
            while not stop.is_set():
                msg = c.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                with lock:
                    seen.add(msg.value())
                try:
                    done = c.commit(message=msg, asynchronous=False)
                except confluent_kafka.KafkaException as e:
                    with lock:  # a rebalance or a moved coordinator: the next commit covers it
                        failures.setdefault(msg.partition(), []).append(str(e))
                    continue
                with lock:
                    for tp in done or []:
                        if tp.error is None:
                            commits.setdefault(tp.partition, []).append(tp.offset)
                        else:
                            failures.setdefault(tp.partition, []).append(str(tp.error))
            c.close()

        threads = [threading.Thread(target=consume, args=(n,), daemon=True) for n in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: len(seen) >= 1000, 90, "1000 messages consumed by the group")
        second.kill()
        try:
            wait_for(lambda: len(seen) >= len(sent), 120, "every message consumed")
        except AssertionError as e:
            with lock:
                missing = sorted(set(sent) - seen)
            raise AssertionError(
                f"{e}: {len(seen)} of {len(sent)} seen; missing {missing[:20]}; "
                f"commit failures { {p: f[-3:] for p, f in failures.items()} }; "
                f"{_group_state(bootstrap, 'three', 'grouped', 6)}\n"
                "surviving broker's log:\n" + "".join(first.output[-150:])
            ) from None
        stop.set()
        for t in threads:
            t.join(30)
        assert seen == set(sent)
        assert sorted(commits) == list(range(6)), (
            "some partitions never had a commit stored: "
            + "; ".join(f"{p}: {len(f)} failed, e.g. {f[-1]}" for p, f in sorted(failures.items()))
        )
        for partition, offsets in commits.items():
            assert offsets == sorted(offsets), f"partition {partition} committed backwards"
    finally:
        cluster.stop()


def _group_state(bootstrap: str, group: str, topic: str, partitions: int) -> str:
    """For a failure message: the group's members and assignment, its committed offsets and
    the partitions' end offsets, as the brokers answer them now."""
    import confluent_kafka
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    tps = [TopicPartition(topic, i) for i in range(partitions)]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        g = admin.describe_consumer_groups([group])[group].result(10)
        members = [
            (m.client_id, [tp.partition for tp in m.assignment.topic_partitions]) for m in g.members
        ]
        asked = [ConsumerGroupTopicPartitions(group, tps)]
        found = admin.list_consumer_group_offsets(asked)[group].result(10)
        committed = [(tp.partition, tp.offset) for tp in found.topic_partitions]
        probe = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
        ends = [probe.get_watermark_offsets(tp, 10) for tp in tps]
        probe.close()
    except Exception as e:  # the message says what could not be found out, and goes on
        return f"group state unknown ({e!r})"
    return f"group {g.state}, members {members}, committed {committed}, watermarks {ends}"


def test_a_named_listener_is_answered_with_the_owner_address_on_it(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """Each broker advertises its own "external" listener (and an "internal" one nobody
    listens on): a lookup naming "external" at a broker that does not own the topic is
    answered with the owner's external address, so the client reaches the owner through it."""
    from magnetar.testing.cluster import broker
    from magnetar.testing.server import free_port

    cluster = Cluster(tmp_path, zookeeper.url(f"/listeners-{uuid.uuid4().hex[:8]}"))
    try:
        for _ in range(2):
            cluster.add_node()
        for i in range(2):
            b = broker(tmp_path / f"broker{i}", cluster.url)
            b.extra_args += [
                "--advertised-listeners",
                f"internal:pulsar://127.0.0.1:{free_port()},"
                f"external:pulsar://127.0.0.1:{b.pulsar_port}",
            ]
            cluster.brokers.append(b.start())
        first, second = cluster.brokers
        topic = "persistent://public/default/listener-owner"
        owner = pulsar.Client(second.pulsar_url, operation_timeout_seconds=10)
        owner.create_producer(topic).send(b"taken by the second broker")
        assert _owner(first.http_url, topic) == second.pulsar_url
        client = pulsar.Client(
            first.pulsar_url, listener_name="external", operation_timeout_seconds=10
        )
        client.create_producer(topic).send(b"through the owner's external listener")
        got = read_all(first.pulsar_url, topic, 2)
        assert got == [b"taken by the second broker", b"through the owner's external listener"]
        client.close()
        owner.close()
    finally:
        cluster.stop()


def _in_another_bundle(*taken: str) -> str:
    """A topic of public/default in a bundle none of ``taken`` falls in."""
    used = {bundle_of(TopicName.parse(t)) for t in taken}
    return "persistent://public/default/" + topic_where("placed", lambda b: b not in used)


def test_a_new_bundle_goes_to_the_broker_with_less_traffic(two_brokers: Cluster) -> None:
    """Each broker owns one bundle; the first's carries a stream, the second's nothing. A
    third bundle, looked up through the first, goes to the second: bundle counts tie, the
    load reports (msgs/s) decide — where fewest-bundles alone would keep it on the first."""
    cluster = two_brokers
    try:
        first, second = cluster.brokers
        busy = "persistent://public/default/busy"
        idle = _in_another_bundle(busy)
        assert _owner(first.http_url, busy) == first.pulsar_url  # HTTP lookups take it here
        assert _owner(second.http_url, idle) == second.pulsar_url
        pub = Publisher(first.pulsar_url, busy).start()
        report = f"{first.http_url}/admin/v2/broker-stats/load-report"
        loaded = wait_for(
            lambda: (r := requests.get(report).json())["msgRate"] > 100 and r,
            30,
            "the first broker to report its traffic",
        )
        assert loaded["topics"] >= 1 and loaded["bundles"] == 1
        third = _in_another_bundle(busy, idle)
        client = pulsar.Client(first.pulsar_url, operation_timeout_seconds=30)
        try:  # a Pulsar lookup through the first broker (not authoritative): placed by load
            client.create_producer(third).send(b"placed")
        finally:
            client.close()
        assert _owner(first.http_url, third) == second.pulsar_url
        pub.stop()
        assert not pub.failed
        pub.close()
    finally:
        cluster.stop()


def test_a_bundle_split_under_load_keeps_serving_and_its_halves_move_apart(
    two_brokers: Cluster,
) -> None:
    """Split the bundle of two streaming topics (one in each future half) with the CLI: both
    halves stay with the owner and nothing stops; unloading one half moves its topic to the
    other broker. Nothing lost or stored twice; a wrong bundle is a 404, a malformed one 400."""
    from magnetar.broker.ownership import bundle_in, equal_boundaries, parse_range

    cluster = two_brokers
    try:
        first, second = cluster.brokers
        dedup = f"{first.http_url}/admin/v2/namespaces/public/default/deduplication"
        assert requests.post(dedup, json=True).status_code == 204
        names = [f"persistent://public/default/split-{i}" for i in range(200)]
        bundle = bundle_of(TopicName.parse(names[0]))
        lo, hi = parse_range(bundle)
        after = sorted({*equal_boundaries(), (lo + hi) // 2})
        mine = [n for n in names if bundle_of(TopicName.parse(n)) == bundle]
        stays = mine[0]
        moves = next(
            n
            for n in mine
            if bundle_in(TopicName.parse(n), after) != bundle_in(TopicName.parse(stays), after)
        )
        assert _owner(first.http_url, stays) == first.pulsar_url
        service = f"{first.pulsar_url},{second.pulsar_url}".replace(",pulsar://", ",")
        pubs = [Publisher(service, t).start() for t in (stays, moves)]
        wait_for(lambda: all(len(p.acked) >= 1000 for p in pubs), 60, "publishing")

        split = subprocess.run(
            [*ADMIN, second.http_url, "namespaces", "split-bundle", "public/default", "-b", bundle],
            capture_output=True,
            text=True,
            timeout=60,
        )  # asked of the other broker: 307 to the owner
        assert split.returncode == 0, split.stderr
        owners = requests.get(f"{first.http_url}/admin/v2/namespaces/public/default/bundles")
        listed = owners.json()["bundles"]
        halves = [bundle_in(TopicName.parse(t), after) for t in (stays, moves)]
        assert owners.json()["numBundles"] == 5 and bundle not in listed
        assert [listed[h] for h in halves] == [first.pulsar_url.removeprefix("pulsar://")] * 2
        before = [len(p.acked) for p in pubs]
        wait_for(
            lambda: all(len(p.acked) >= b + 1000 for p, b in zip(pubs, before, strict=True)),
            60,
            "publishing after the split",
        )

        ns = f"{first.http_url}/admin/v2/namespaces/public/default"
        assert requests.put(f"{ns}/{halves[1]}/unload").status_code == 204
        wait_for(lambda: _owner(second.http_url, moves) == second.pulsar_url, 60, "the move")
        before = [len(p.acked) for p in pubs]
        wait_for(
            lambda: all(len(p.acked) >= b + 1000 for p, b in zip(pubs, before, strict=True)),
            60,
            "publishing after the move",
        )
        assert _owner(first.http_url, stays) == first.pulsar_url

        gone = requests.put(f"{ns}/{bundle}/split")
        assert gone.status_code == 404 and "its bundles" in gone.json()["reason"]
        bad = requests.put(f"{ns}/not-a-range/split")
        assert bad.status_code == 400 and "0xLO_0xHI" in bad.json()["reason"]
        for p, topic in zip(pubs, (stays, moves), strict=True):
            p.stop()
            assert not p.failed
            check_history(read_all(service, topic, len(p.acked)), p.acked)
            p.close()
    finally:
        cluster.stop()
