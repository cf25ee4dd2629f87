"""What the tiered-storage tests and their crash child share: the in-process rig (storage
engine + managed ledger + tier) and a deterministic stream of Pulsar entries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.core import formats
from magnetar.core.config import Settings, build_settings
from magnetar.ledger import ManagedLedger
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.frames import pack_payload
from magnetar.storage import Entry, SegmentInfo, SegmentState
from magnetar.tier import ObjectStore, Tier

PARTITION = "public/default/tiered"


@dataclass
class Rig:
    """A storage engine, a managed ledger on PARTITION and a tier over ``store``."""

    settings: Settings
    meta: MetadataStore
    engine: LocalStorage  # standalone's storage: the writer over the engine's ledgers
    tier: Tier
    ledger: ManagedLedger
    closed: bool = False

    @classmethod
    async def open(cls, settings: Settings, store: ObjectStore, row_group_rows: int) -> Rig:
        meta = open_metadata_store(settings.metadata)
        engine = await LocalStorage.open(settings, meta)
        tier = Tier(store, row_group_rows=row_group_rows)
        ledger = await ManagedLedger.open(PARTITION, engine, tier)
        await ledger.settled()  # what the open found settled, as the first offload sees it
        return cls(settings, meta, engine, tier, ledger)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self.ledger.settled()
            self.tier.close()
            await self.engine.aclose()
            await self.meta.aclose()

    def segment(self, segment_id: int) -> SegmentInfo:
        return next(s for s in self.ledger.segments() if s.segment_id == segment_id)

    def in_state(self, state: SegmentState) -> list[SegmentInfo]:
        return [s for s in self.ledger.segments() if s.state is state]


OpenRig = Callable[..., Awaitable[Rig]]


def rig_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Small segments (5 entries) and a one-byte tail cache, so reads really hit segment
    files or the object store instead of memory."""
    base = {"data_dir": data_dir, "segment_max_entries": 5, "tail_cache_bytes": 1}
    return build_settings(env={}, overrides={**base, **overrides})


async def reopen(rig: Rig, open_rig: OpenRig) -> Rig:
    """Close ``rig`` cleanly and open it again on the same data and store (cold caches)."""
    await rig.aclose()
    return await open_rig(rig.tier.store, rig.tier.offloader.row_group_rows, rig.settings)


# -- entries ------------------------------------------------------------------------------------


def pulsar_entry(index: int, size: int) -> bytes:
    """A Pulsar entry as a producer sends it: a batch of ``size`` messages (``size`` 0: one
    message, not batched), with keys, properties and event times."""
    if size == 0:
        metadata = pb.MessageMetadata(
            producer_name="producer-a",
            sequence_id=index,
            publish_time=1,
            partition_key=f"key-{index}",
            event_time=1_000 + index,
            properties=[pb.KeyValue(key="n", value=str(index))],
        )
        return pack_payload(metadata, f"single-{index}".encode())
    messages = [
        BatchedMessage(
            pb.SingleMessageMetadata(
                partition_key=f"key-{index}-{j}",
                event_time=2_000 + j,
                properties=[pb.KeyValue(key="j", value=str(j))],
            ),
            f"batched-{index}-{j}".encode() * (j + 1),
        )
        for j in range(size)
    ]
    metadata = pb.MessageMetadata(
        producer_name="producer-b", sequence_id=index, publish_time=1, num_messages_in_batch=size
    )
    return pack_payload(metadata, build_batch(messages))


def batch_size(index: int) -> int:
    """Entry ``index`` of the mixed stream: even ones single messages, odd ones batches."""
    return 0 if index % 2 == 0 else 1 + index % 3


def publish_time(index: int) -> int:
    return 1_000_000 + index * 1000


async def append_mixed(ledger: ManagedLedger, entries: int, first: int = 0) -> None:
    """Pulsar entries ``first`` .. ``first + entries - 1`` of the mixed stream: single
    messages and batches of 1-3, entry i published at ``publish_time(i)``."""
    for i in range(first, first + entries):
        size = batch_size(i)
        await ledger.append(
            pulsar_entry(i, size),
            count=max(size, 1),
            publish_time=publish_time(i),
            fmt=formats.PULSAR,
        )


def expected_messages(entries: int) -> list[tuple[int, formats.MessageRow]]:
    """What ``messages(read_all(...))`` returns for the first ``entries`` of the stream."""
    out, offset = [], 0
    for i in range(entries):
        rows = formats.unpack(formats.PULSAR, pulsar_entry(i, batch_size(i)))
        out += [(offset + j, row) for j, row in enumerate(rows)]
        offset += len(rows)
    return out


async def read_all(ledger: ManagedLedger, start: int = 0) -> list[Entry]:
    out: list[Entry] = []
    offset = start
    while offset < ledger.end_offset:
        got = await ledger.read(offset, max_entries=3)
        assert got, f"read at {offset} returned nothing before the end {ledger.end_offset}"
        out += got
        offset = got[-1].next_offset
    return out


def messages(entries: list[Entry]) -> list[tuple[int, formats.MessageRow]]:
    """(offset, message) of every message: what a consumer sees, whatever the entry bytes."""
    return [
        (e.base_offset + i, row)
        for e in entries
        for i, row in enumerate(formats.unpack(e.format, e.payload))
    ]
