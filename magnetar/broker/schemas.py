"""Schema registry: versioned schemas per topic and compatibility checks (Pulsar semantics).

    /schemas/<tenant>/<ns>/<topic>/<version>   {"type": ..., "data": base64, "properties": {}}

A topic's schemas are shared by all its partitions. Record schemas (AVRO, JSON, PROTOBUF —
their definitions are Avro-style JSON records) are checked with Avro's schema-resolution
rules (``avro_compat``: promotions, unions, defaults, aliases, enum symbols, nested types), as
Pulsar's broker does. BACKWARD: the new schema reads data written with the old one;
FORWARD: the old reads the new; FULL: both. ``*_TRANSITIVE`` checks every earlier version.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from magnetar.broker import avro_compat
from magnetar.broker.errors import IncompatibleSchemaError
from magnetar.meta import MetadataStore

NONE_TYPES = ("NONE", "BYTES")
RECORD_TYPES = ("AVRO", "JSON", "PROTOBUF", "PROTOBUF_NATIVE")


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    type: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    name: str = ""

    def to_bytes(self) -> bytes:
        body = {
            "type": self.type,
            "data": base64.b64encode(self.data).decode(),
            "properties": self.properties,
            "name": self.name,
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> SchemaInfo:
        d = json.loads(raw)
        return cls(
            d["type"], base64.b64decode(d["data"]), d.get("properties", {}), d.get("name", "")
        )

    def same_as(self, other: SchemaInfo) -> bool:
        return self.type == other.type and self.data == other.data


def can_read(reader: SchemaInfo, writer: SchemaInfo) -> bool:
    """True when data written with ``writer`` can be read with ``reader``: Avro's schema
    resolution (``avro_compat``) for record schemas, equality for definitions that are not
    Avro (a PROTOBUF_NATIVE descriptor), and any pair of the same other type."""
    if reader.type != writer.type:
        return False
    if reader.type not in RECORD_TYPES:
        return True
    try:
        return avro_compat.can_read(avro_compat.parse(reader.data), avro_compat.parse(writer.data))
    except avro_compat.InvalidAvroSchema:
        return reader.data == writer.data


def check(strategy: str, new: SchemaInfo, existing: list[SchemaInfo]) -> None:
    """Raise IncompatibleSchemaError unless ``new`` may follow ``existing`` under ``strategy``."""
    if not existing or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("the topic's schema strategy is ALWAYS_INCOMPATIBLE")
    against = existing if strategy.endswith("_TRANSITIVE") else existing[-1:]
    base = strategy.removesuffix("_TRANSITIVE")
    for old in against:
        backward = can_read(new, old)
        forward = can_read(old, new)
        ok = {"BACKWARD": backward, "FORWARD": forward, "FULL": backward and forward}.get(base)
        if not ok:
            raise IncompatibleSchemaError(
                f"schema of type {new.type} is not {base} compatible with version "
                f"{existing.index(old)} ({old.type}); change it compatibly or set the "
                "namespace's schemaCompatibilityStrategy"
            )


class SchemaRegistry:
    """Versions of each topic's schema, in the metadata store."""

    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta

    @staticmethod
    def _path(topic_path: str) -> str:
        return f"/schemas/{topic_path}"

    async def versions(self, topic_path: str) -> list[SchemaInfo]:
        base = self._path(topic_path)
        out = []
        for child in await self.meta.list_children(base):
            node = await self.meta.get(f"{base}/{child}")
            if node is not None:
                out.append(SchemaInfo.from_bytes(node.value))
        return out

    async def get(
        self, topic_path: str, version: int | None = None
    ) -> tuple[int, SchemaInfo] | None:
        versions = await self.versions(topic_path)
        if not versions:
            return None
        v = len(versions) - 1 if version is None else version
        if not 0 <= v < len(versions):
            return None
        return v, versions[v]

    async def add(self, topic_path: str, schema: SchemaInfo, strategy: str) -> int:
        """The version of ``schema``: an existing identical one, or a new one if compatible."""
        versions = await self.versions(topic_path)
        for i, existing in enumerate(versions):
            if existing.same_as(schema):
                return i
        check(strategy, schema, versions)
        version = len(versions)
        await self.meta.put(
            f"{self._path(topic_path)}/{version:010d}", schema.to_bytes(), expected_version=-1
        )
        return version

    async def check_readable(self, topic_path: str, schema: SchemaInfo, strategy: str) -> None:
        """A consumer's schema: registered if the topic has none, else checked compatible."""
        versions = await self.versions(topic_path)
        if not versions:
            await self.add(topic_path, schema, strategy)
            return
        if any(v.same_as(schema) for v in versions):
            return
        check(strategy, schema, versions)

    async def delete(self, topic_path: str) -> None:
        await self.meta.delete_recursive(self._path(topic_path))
