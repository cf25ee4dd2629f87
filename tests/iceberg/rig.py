"""What the Iceberg tests share: a storage engine + managed ledger whose tier has an
embedded SQLite catalog, entries with JSON values, and reading a table back with pyiceberg."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from magnetar.core import formats
from magnetar.core.config import Settings
from magnetar.ledger import ManagedLedger
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.frames import pack_payload
from magnetar.storage import SegmentInfo, SegmentState
from magnetar.tier import IcebergTables, ObjectStore, Tier, ValueSchema
from tests.tier.rig import rig_settings

PARTITION = "public/default/orders"
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Ship",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "int"}],
            },
        },
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
}


EVENT_V1 = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}


AT = datetime.datetime(2026, 11, 27, 12, 0, 0, 123_000, tzinfo=datetime.UTC)
DAY = datetime.date(2026, 11, 27)


def event(i: int) -> dict[str, Any]:
    """An EVENT_V1 value as fastavro takes it (logical types as Python values)."""
    return {
        "id": i,
        "at": AT + datetime.timedelta(seconds=i),
        "day": DAY,
        "ref": uuid.UUID(int=i),
        "amount": decimal.Decimal(i * 100 + 34).scaleb(-2),  # i.34
    }


def avro(value: dict[str, Any], definition: dict[str, Any] = EVENT_V1) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(definition), value)
    return out.getvalue()


def order(i: int, *, note: bool = False) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": i,
        "item": f"item-{i}",
        "ship": {"city": f"c{i % 3}", "zip": 1000 + i},
    }
    if note:
        value["note"] = f"note-{i}"
    return value


@dataclass
class IcebergRig:
    settings: Settings
    meta: MetadataStore
    engine: LocalStorage  # standalone's storage: the writer over the engine's ledgers
    tier: Tier
    ledger: ManagedLedger

    @classmethod
    async def open(
        cls, root: Path, store: ObjectStore, partition: str = PARTITION, **overrides: Any
    ) -> IcebergRig:
        settings = rig_settings(root / "data", **overrides)
        meta = open_metadata_store(settings.metadata)
        engine = await LocalStorage.open(settings, meta)
        tables = IcebergTables.open(store, "sqlite", f"sqlite:///{root / 'iceberg.db'}")
        tier = Tier(store, row_group_rows=4, iceberg=tables)
        ledger = await ManagedLedger.open(partition, engine, tier)
        await ledger.settled()  # what the open found settled, as the first offload sees it
        return cls(settings, meta, engine, tier, ledger)

    async def aclose(self) -> None:
        await self.ledger.settled()
        self.tier.close()
        await self.engine.aclose()
        await self.meta.aclose()

    @property
    def tables(self) -> IcebergTables:
        assert self.tier.iceberg is not None
        return self.tier.iceberg

    def closed(self) -> list[SegmentInfo]:
        return [s for s in self.ledger.segments() if s.state is SegmentState.CLOSED and s.local]


def json_entry(
    values: Sequence[dict[str, Any] | bytes], first_seq: int, version: int | None = 0
) -> bytes:
    """A Pulsar batch of JSON values (one message unbatched when there is one value); a
    value given as bytes goes as it is (an AVRO value, say)."""
    if len(values) == 1:
        meta = pb.MessageMetadata(
            producer_name="p", sequence_id=first_seq, publish_time=1, partition_key=f"k{first_seq}"
        )
        if version is not None:
            meta.schema_version = version.to_bytes(8, "big")
        return pack_payload(meta, _encoded(values[0]))
    batch = [
        BatchedMessage(
            pb.SingleMessageMetadata(partition_key=f"k{first_seq + j}", sequence_id=first_seq + j),
            _encoded(v),
        )
        for j, v in enumerate(values)
    ]
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=first_seq, publish_time=1, num_messages_in_batch=len(values)
    )
    if version is not None:
        meta.schema_version = version.to_bytes(8, "big")
    return pack_payload(meta, build_batch(batch))


def _encoded(value: dict[str, Any] | bytes) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


async def append_orders(
    ledger: ManagedLedger,
    first: int,
    count: int,
    *,
    batch: int = 3,
    note: bool = False,
    version: int = 0,
    publish_time: int = 1_700_000_000_000,
) -> None:
    """Orders ``first`` .. ``first + count - 1`` as batches of ``batch`` (the last maybe
    smaller), published ``publish_time`` + 1 s per entry."""
    i = first
    while i < first + count:
        values = [order(j, note=note) for j in range(i, min(i + batch, first + count))]
        await ledger.append(
            json_entry(values, i, version),
            count=len(values),
            publish_time=publish_time + (i - first) * 1000,
            fmt=formats.PULSAR,
        )
        i += len(values)


def schema(*versions: dict[str, Any]) -> ValueSchema:
    return ValueSchema("JSON", tuple(versions))


def read_table(tables: IcebergTables, name: str = "public.default.orders") -> pa.Table:
    """The whole table, read the way an outside reader does, sorted by offset."""
    table = tables.catalog.load_table(name)
    return (
        table.scan().to_arrow().sort_by([("__partition", "ascending"), ("__offset", "ascending")])
    )


def data_files(tables: IcebergTables, name: str = "public.default.orders") -> list[str]:
    table = tables.catalog.load_table(name)
    return sorted(task.file.file_path for task in table.scan().plan_files())
