"""Topics as Iceberg tables end to end: a real ``magnetar standalone``, pulsar-client with a
JSON and an Avro schema, a confluent-kafka producer, offload by namespace policy, then the
server stopped and the tables read by pyiceberg, Polars and DuckDB alone."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pulsar
import pytest
from confluent_kafka import Producer
from pulsar.schema import AvroSchema, Double, Integer, JsonSchema, Record, String
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, wait_until

SEGMENT = 20  # entries per segment; every message below is an entry of its own
ARGS = [
    "--segment-max-entries",
    str(SEGMENT),
    "--offload-check-interval",
    "0.2",
    "--retention-check-interval",
    "0.2",
    "--iceberg-snapshot-max-age-ms",  # maintenance expires every snapshot but the newest
    "0",
    "--iceberg-min-snapshots",
    "1",
]


class Address(Record):
    city = String()
    zip = Integer()


class Order(Record):
    id = Integer()
    item = String()
    price = Double()
    ship = Address()


# Order's next version: a new optional field with a default, FULL-compatible with Order
OrderV2 = type(
    "Order",
    (Record,),
    {
        "id": Integer(),
        "item": String(),
        "price": Double(),
        "ship": Address(),
        "note": String(required_default=True),
    },
)


def order(i: int) -> dict[str, Any]:
    return {"id": i, "item": f"item-{i}", "price": i * 1.5, "ship": {"city": f"c{i % 4}", "zip": i}}


@dataclass
class Tables:
    catalog: Catalog
    data_dir: Path
    sent: dict[str, list[dict[str, Any]]]
    admin: dict[str, Any]  # answers of the admin API and CLI while the server ran


def offloaded(admin: AdminHttp, topic: str, ns: str = "public/default") -> int:
    stats = admin.get(f"/admin/v2/persistent/{ns}/{topic}/internal-stats")
    return sum(1 for led in stats["ledgers"] if led["state"] == "OFFLOADED")


def send_pulsar(
    client: pulsar.Client,
    topic: str,
    schema: Any,
    records: list[Record],
    ns: str = "public/default",
) -> None:
    producer = client.create_producer(
        f"persistent://{ns}/{topic}", schema=schema, batching_enabled=False
    )
    for i, rec in enumerate(records):
        producer.send(rec, partition_key=f"k{i}")
    producer.close()


def cli(server: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--url", server.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tables]:
    """Produce, wait until two segments of every topic are offloaded (and the retention
    topic's trimmed), stop the server, open its catalog as an outside reader would."""
    data_dir = tmp_path_factory.mktemp("iceberg")
    sent: dict[str, list[dict[str, Any]]] = {}
    with StandaloneProcess(data_dir, extra_args=ARGS) as server:
        admin = AdminHttp(server.http_url)
        admin.ok("POST", "/admin/v2/namespaces/public/default/offloadThreshold", 0)
        client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=10)
        # JSON: 25 from pulsar-client, then 16 from a Kafka producer (41: two segments close)
        sent["orders"] = [order(i) for i in range(41)]
        send_pulsar(
            client,
            "orders",
            JsonSchema(Order),
            [Order(**{**o, "ship": Address(**o["ship"])}) for o in sent["orders"][:25]],
        )
        kafka = Producer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "linger.ms": 0})
        for i, o in enumerate(sent["orders"][25:], start=25):
            kafka.produce("orders", json.dumps(o).encode(), key=f"k{i}".encode())
            kafka.flush(10)
        # AVRO: 41 from pulsar-client
        sent["avro_orders"] = [order(i) for i in range(41)]
        send_pulsar(
            client,
            "avro_orders",
            AvroSchema(Order),
            [Order(**{**o, "ship": Address(**o["ship"])}) for o in sent["avro_orders"]],
        )
        # evolution: 20 as Order, then 21 as OrderV2 with a note
        evolved = [order(i) for i in range(20)] + [
            {**order(i), "note": f"note-{i}"} for i in range(20, 41)
        ]
        sent["evolving"] = evolved
        send_pulsar(
            client,
            "evolving",
            JsonSchema(Order),
            [Order(**{**o, "ship": Address(**o["ship"])}) for o in evolved[:20]],
        )
        send_pulsar(
            client,
            "evolving",
            JsonSchema(OrderV2),
            [OrderV2(**{**o, "ship": Address(**o["ship"])}) for o in evolved[20:]],
        )
        # retention: offloaded, then trimmed by a policy of the topic
        sent["trimmed"] = [order(i) for i in range(41)]
        send_pulsar(
            client,
            "trimmed",
            JsonSchema(Order),
            [Order(**{**o, "ship": Address(**o["ship"])}) for o in sent["trimmed"]],
        )
        # a namespace whose tables are not maintained: their snapshots stay
        admin.ok("PUT", "/admin/v2/namespaces/public/kept")
        admin.ok("POST", "/admin/v2/namespaces/public/kept/offloadThreshold", 0)
        admin.ok("POST", "/admin/v2/namespaces/public/kept/icebergMaintenance", False)
        send_pulsar(
            client,
            "kept",
            JsonSchema(Order),
            [Order(**{**o, "ship": Address(**o["ship"])}) for o in sent["orders"]],
            ns="public/kept",
        )
        client.close()
        wait_until(lambda: offloaded(admin, "kept", "public/kept") == 2, "kept offloaded", 60)
        for topic in sent:
            wait_until(lambda t=topic: offloaded(admin, t) == 2, f"{topic} offloaded", timeout=60)
        admin.ok(
            "POST",
            "/admin/v2/persistent/public/default/trimmed/retention",
            {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        )
        wait_until(lambda: offloaded(admin, "trimmed") == 0, "trimmed by retention", timeout=60)
        wait_until(
            lambda: (
                admin.get("/admin/v2/persistent/public/default/orders/iceberg")["snapshots"] == 1
            ),
            "old snapshots of orders expired",
            timeout=60,
        )
        answers = {
            "kept": admin.get("/admin/v2/persistent/public/kept/kept/iceberg"),
            "rest": admin.get("/admin/v2/persistent/public/default/orders/iceberg"),
            "cli": cli(server, "topics", "iceberg", "orders"),
            "maintenance": admin.get("/admin/v2/namespaces/public/default/icebergMaintenance"),
        }
        admin.ok("POST", "/admin/v2/namespaces/public/default/icebergMaintenance", False)
        answers["off"] = admin.get("/admin/v2/persistent/public/default/orders/iceberg")
    catalog = SqlCatalog(  # the catalog's name is part of its SQL rows: "magnetar"
        "magnetar",
        uri=f"sqlite:///{data_dir / 'iceberg.db'}",
        warehouse=f"file://{data_dir / 'tier' / 'iceberg'}",
    )
    yield Tables(catalog, data_dir, sent, answers)


def test_pulsar_and_kafka_json_messages_are_typed_rows(tables: Tables) -> None:
    table = tables.catalog.load_table("public.default.orders")
    rows = table.scan().to_arrow().sort_by("__offset")
    assert rows.column("__offset").to_pylist() == list(range(2 * SEGMENT))
    typed = rows.select(["id", "item", "price", "ship"]).to_pylist()
    assert typed == tables.sent["orders"][: 2 * SEGMENT]  # Kafka's rows typed too (25..39)
    assert rows.column("__key").to_pylist() == [f"k{i}" for i in range(2 * SEGMENT)]
    assert rows.column("__partition").to_pylist() == [0] * (2 * SEGMENT)
    some = table.scan(row_filter="id >= 30", selected_fields=("id",)).to_arrow()
    assert sorted(some.column("id").to_pylist()) == list(range(30, 40))


def test_avro_messages_are_typed_rows(tables: Tables) -> None:
    rows = tables.catalog.load_table("public.default.avro_orders").scan().to_arrow()
    rows = rows.sort_by("__offset")
    assert rows.column("__offset").to_pylist() == list(range(2 * SEGMENT))
    assert (
        rows.select(["id", "item", "price", "ship"]).to_pylist()
        == tables.sent["avro_orders"][: 2 * SEGMENT]
    )


def test_polars_reads_the_table(tables: Tables) -> None:
    table = tables.catalog.load_table("public.default.avro_orders")
    frame = pl.scan_iceberg(table).filter(pl.col("id") < 5).select("__offset", "item").collect()
    assert sorted(frame["item"].to_list()) == [f"item-{i}" for i in range(5)]


def test_duckdb_reads_the_files_pyiceberg_plans(tables: Tables) -> None:
    table = tables.catalog.load_table("public.default.orders")
    files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    got = duckdb.sql(
        f"SELECT count(*), count(DISTINCT __offset), min(__offset), max(__offset), sum(id) "
        f"FROM read_parquet({files!r})"
    ).fetchall()
    assert got == [(40, 40, 0, 39, sum(range(40)))]


def test_schema_evolution_is_an_iceberg_schema_update(tables: Tables) -> None:
    table = tables.catalog.load_table("public.default.evolving")
    assert [f.name for f in table.schema().fields][-1] == "note"
    rows = table.scan().to_arrow().sort_by("__offset")
    assert rows.column("__offset").to_pylist() == list(range(2 * SEGMENT))
    want = [{**o, "note": o.get("note")} for o in tables.sent["evolving"][: 2 * SEGMENT]]
    assert rows.select(["id", "item", "price", "ship", "note"]).to_pylist() == want


def test_retention_shows_in_the_table(tables: Tables) -> None:
    table = tables.catalog.load_table("public.default.trimmed")
    assert table.scan().to_arrow().num_rows == 0
    snap = table.current_snapshot()
    assert snap is not None and snap.summary is not None
    assert snap.summary["magnetar.operation"] == "retention"
    assert len(json.loads(snap.summary["magnetar.segments"])) == 2
    referenced = [task.file.file_path for task in table.scan().plan_files()]
    assert referenced == []


def test_the_admin_api_describes_the_table(tables: Tables) -> None:
    got = tables.admin["rest"]
    table = tables.catalog.load_table("public.default.orders")
    snap = table.current_snapshot()
    assert snap is not None
    assert (got["table"], got["catalog"], got["exists"]) == (
        "public.default.orders",
        "sqlite",
        True,
    )
    assert got["currentSnapshot"]["id"] == snap.snapshot_id
    assert got["partitions"] == [
        {
            "partition": 0,
            "offsetsCovered": [[0, 2 * SEGMENT - 1]],
            "endOffset": 41,
            "lagMessages": 1,
        }
    ]
    assert got["lagMessages"] == 1  # the one message in the open segment
    assert (tables.admin["maintenance"], got["maintenance"]) == (True, True)
    assert tables.admin["off"]["maintenance"] is False
    cli_run = tables.admin["cli"]
    assert cli_run.returncode == 0, cli_run.stderr
    assert "public.default.orders" in cli_run.stdout


def test_a_node_without_catalog_says_so(tmp_path: Path) -> None:
    with StandaloneProcess(tmp_path, extra_args=["--iceberg-catalog", "none"]) as server:
        admin = AdminHttp(server.http_url)
        client = pulsar.Client(server.pulsar_url)
        client.create_producer("plain").close()
        client.close()
        reply = admin.call("GET", "/admin/v2/persistent/public/default/plain/iceberg")
        assert reply.status == 400
        assert "--iceberg-catalog" in reply.reason
        run = cli(server, "topics", "iceberg", "plain")
        assert run.returncode != 0 and "--iceberg-catalog" in run.stderr + run.stdout


def test_a_bad_catalog_setting_stops_the_start(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar.cli",
            "standalone",
            "--data-dir",
            str(tmp_path),
            "--iceberg-catalog",
            "hive",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "iceberg_catalog" in run.stderr and "sqlite, rest, none" in run.stderr


def test_maintenance_expires_snapshots_unless_the_namespace_turns_it_off(tables: Tables) -> None:
    orders = tables.catalog.load_table("public.default.orders")
    assert len(orders.snapshots()) == 1  # expired down to the current one
    assert orders.scan().to_arrow().num_rows == 2 * SEGMENT  # which still holds every row
    kept = tables.catalog.load_table("public.kept.kept")
    assert len(kept.snapshots()) == 2  # one append per segment, none expired
    assert tables.admin["kept"]["maintenance"] is False


@pytest.mark.slow
def test_history_offloaded_without_catalog_is_registered_once_it_is_on(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    with StandaloneProcess(data_dir, extra_args=[*ARGS, "--iceberg-catalog", "none"]) as server:
        admin = AdminHttp(server.http_url)
        admin.ok("POST", "/admin/v2/namespaces/public/default/offloadThreshold", 0)
        client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=10)
        send_pulsar(
            client,
            "old",
            JsonSchema(Order),
            [Order(**{**o, "ship": Address(**o["ship"])}) for o in map(order, range(41))],
        )
        client.close()
        wait_until(lambda: offloaded(admin, "old") == 2, "offloaded without a catalog", 60)
    with StandaloneProcess(data_dir, extra_args=ARGS) as server:
        admin = AdminHttp(server.http_url)
        path = "/admin/v2/persistent/public/default/old/iceberg"

        def registered() -> bool:
            spans = admin.get(path)["partitions"][0]["offsetsCovered"]
            return len(spans) == 1 and spans[0][0] == 0 and spans[0][1] >= 2 * SEGMENT - 1

        wait_until(registered, "the old segments registered", timeout=60)
    catalog = SqlCatalog(
        "magnetar",
        uri=f"sqlite:///{data_dir / 'iceberg.db'}",
        warehouse=f"file://{data_dir / 'tier' / 'iceberg'}",
    )
    rows = catalog.load_table("public.default.old").scan().to_arrow().sort_by("__offset")
    # The two full segments, and the one-message segment that was open at the stop once it
    # is offloaded too: its writer closes it at the restart (as Pulsar closes a ledger).
    n = rows.num_rows
    assert n in (2 * SEGMENT, 2 * SEGMENT + 1)
    assert rows.column("__offset").to_pylist() == list(range(n))
    assert rows.column("id").to_pylist() == list(range(n))
