"""Every topic is also an Iceberg table: its offloaded segments, registered in a catalog.

The catalog is pyiceberg's SQL catalog on SQLite in the data directory (the default), or an
Iceberg REST catalog. The warehouse is the tier's object store (``<tier>/iceberg``); the
table of ``tenant/ns/topic`` is ``tenant.ns.topic`` at ``<tier>/iceberg/tenant/ns/topic``,
one table for all partitions of a partitioned topic (``__partition``).

A segment's data files are its objects in the tier (:meth:`IcebergTables.data_files`):
written by the offloader under its offload attempt's prefix
(``<partition>/<segment>/<attempt>/iceberg-<day>-<n>.parquet``, one per run of offsets
published on one UTC day), they hold the typed columns and the columns that rebuild the
original entries (batches, compression, Kafka record batches) byte for byte, so each
message is stored once. They are registered with ``add_files`` in one append snapshot whose
summary names the segment and its offsets (``magnetar.segments``): what an attempt wrote is
found and deleted by its id, and a reader can tell which offsets a snapshot added. The next
owner of a segment whose attempt another broker may still be running fences that attempt
(:meth:`IcebergTables.fence`): its commit is refused from then on.

Segments offloaded before the catalog (or before this layout: ``data.parquet`` plus
``iceberg-<day>.pq`` files) keep their objects; :meth:`IcebergTables.write_files` makes
table files of such a segment's rows when it is registered later.

Calls block (catalog and object store I/O): run them on a worker thread.
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from magnetar.core.names import TopicName
from magnetar.tier.errors import IcebergCommitError, TierError
from magnetar.tier.iceberg.columns import (
    ValueSchema,
    split_by_day,
    split_runs,
    table_schema,
    to_table_rows,
)
from magnetar.tier.object_store import ObjectStore, S3ObjectStore
from magnetar.tier.offloader import ToFiles

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

CATALOG_KINDS = ("sqlite", "rest", "none")
SEGMENTS_PROPERTY = "magnetar.segments"
OPERATION_PROPERTY = "magnetar.operation"
COMMIT_TRIES = 20
# A segment per append would leave a manifest per segment for every scan to open: merge them
# (Iceberg's default merge thresholds: 100 manifests, 8 MB). A commit that loses its race is
# not re-applied by pyiceberg on top of a table nobody checked (its default retries): it
# fails, and Magnetar decides again on the new table (_retry_lost_commits).
NO_REBASE = {"commit.retry.num-retries": "0"}
# set on the tables this version makes: their columns are typed by the fields' logical types
# (a table made before keeps the stored types: a long column cannot become a timestamp)
LOGICAL_TYPES = {"magnetar.logical-types": "true"}
TABLE_PROPERTIES = {"commit.manifest-merge.enabled": "true", **NO_REBASE, **LOGICAL_TYPES}
# table property FENCE_PROPERTY + attempt id: that offload or registration may never commit
FENCE_PROPERTY = "magnetar.fenced."
FENCE_KEEP_MS = 7 * 24 * 3600 * 1000  # fences older than this go when another is written
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """A segment's data files (object keys) as one commit adds or removes them."""

    partition: str  # the partition's path, tenant/ns/local
    segment_id: int
    first_offset: int
    last_offset: int
    attempt: str
    keys: tuple[str, ...]

    def summary(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "segment": self.segment_id,
            "firstOffset": self.first_offset,
            "lastOffset": self.last_offset,
            "attempt": self.attempt,
            "files": len(self.keys),
        }


def identifier(partition: str) -> tuple[str, str, str]:
    """``(tenant, namespace, topic)`` of a partition's table (the topic without
    ``-partition-N``)."""
    name = TopicName.parse(partition)
    return name.tenant, name.namespace, name.base_local


def partition_index(partition: str) -> int:
    """The ``__partition`` value of a partition's rows (0 for a non-partitioned topic, as
    Kafka numbers it)."""
    return max(TopicName.parse(partition).partition, 0)


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError:  # pragma: no cover - a dependency; the hint is for broken installs
        raise TierError(
            "pyiceberg is not installed: pip install 'pyiceberg[sql-sqlite,pyarrow]' or set "
            "--iceberg-catalog none"
        ) from None
    return pyiceberg.catalog


class IcebergTables:
    """The Iceberg tables of one node's topics. Blocking: call from worker threads."""

    def __init__(self, store: ObjectStore, kind: str, url: str) -> None:
        if kind not in ("sqlite", "rest"):
            raise TierError(f"unknown Iceberg catalog {kind!r}: use sqlite or rest")
        self.store = store
        self.kind = kind
        self.url = url
        self.warehouse = f"{store.url}/iceberg"
        self._catalog: Catalog | None = None
        self._logical: dict[tuple[str, str, str], bool] = {}  # per table, once it exists
        # One catalog call at a time from this process (commits, table creation, reads):
        # no two of our own connections ever wait on each other's SQLite locks.
        self._lock = threading.RLock()

    @classmethod
    def open(cls, store: ObjectStore, kind: str, url: str) -> IcebergTables:
        """The tables in a catalog of ``kind`` (``sqlite``: ``url`` is an SQLAlchemy SQLite
        URL; ``rest``: the REST catalog's URI) with ``store`` as warehouse. The catalog is
        reached on first use (pyiceberg is imported then, not at start)."""
        return cls(store, kind, url)

    @property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog (what an outside reader opens with the same properties)."""
        with self._lock:
            if self._catalog is None:
                self._catalog = self._connect()
            return self._catalog

    def _connect(self) -> Catalog:
        catalogs = _pyiceberg()
        props = self.catalog_properties()
        if self.kind == "sqlite":
            return _sqlite_catalog(props)
        catalog: Catalog = catalogs.load_catalog("magnetar", **props)
        return catalog

    def catalog_properties(self) -> dict[str, str]:
        """Properties that open this catalog in pyiceberg (``load_catalog(name, **these)``)."""
        kind = {"sqlite": "sql", "rest": "rest"}[self.kind]
        return {"type": kind, "uri": self.url, "warehouse": self.warehouse} | file_io_properties(
            self.store
        )

    def _catalog_now(self) -> Catalog:
        assert self._catalog is not None
        return self._catalog

    def uri(self, key: str) -> str:
        return f"{self.store.url}/{key}"

    # -- writing ---------------------------------------------------------------------------

    def data_files(self, partition: str, value_schema: ValueSchema | None) -> ToFiles:
        """How the offloader turns a segment's rows into the objects that are also the
        table's data files (typed by ``value_schema``, with the tier's columns)."""
        index = partition_index(partition)

        def to_files(layout: pa.Table) -> list[tuple[str, pa.Table]]:
            logical = self.logical_types(partition)
            rows = to_table_rows(layout, index, value_schema, tier_columns=True, logical=logical)
            return [(f"iceberg-{day:06d}", part) for day, part in split_runs(rows)]

        return to_files

    def write_files(
        self,
        partition: str,
        segment_id: int,
        attempt_prefix: str,
        layout: pa.Table,
        value_schema: ValueSchema | None,
    ) -> list[str]:
        """Write the table's data files for one segment (rows in the tier's Parquet layout)
        under ``attempt_prefix``; returns their keys. Durable when this returns; nothing is
        registered yet. The table is created, or its schema widened, first."""
        logical = self.logical_types(partition)
        rows = to_table_rows(layout, partition_index(partition), value_schema, logical=logical)
        self.ensure_table(partition, rows.schema)
        keys = []
        for day, part in split_by_day(rows):
            # not "*.parquet": that suffix marks the tier's own segment objects
            key = f"{attempt_prefix}/iceberg-{day:06d}.pq"
            sink = io.BytesIO()
            pq.write_table(part, sink, compression="zstd", write_statistics=True)
            self.store.put(key, sink.getvalue())
            keys.append(key)
        return keys

    def logical_types(self, partition: str) -> bool:
        """Whether the partition's table types its columns by the fields' logical types:
        a table this version makes does (``LOGICAL_TYPES``), one made before does not."""
        ident = identifier(partition)
        known = self._logical.get(ident)
        if known is None:
            from pyiceberg.exceptions import NoSuchTableError

            with self._lock:
                try:
                    table = self.catalog.load_table(ident)
                except NoSuchTableError:
                    return True  # this version will make it
            known = all(table.properties.get(k) == v for k, v in LOGICAL_TYPES.items())
            self._logical[ident] = known
        return known

    def prepare_table(self, partition: str, value_schema: ValueSchema | None) -> Table:
        """:meth:`ensure_table` with the columns of ``value_schema`` (and the tier's)."""
        logical = self.logical_types(partition)
        schema = table_schema(value_schema, tier_columns=True, logical=logical)
        return self.ensure_table(partition, schema)

    def ensure_table(self, partition: str, schema: pa.Schema) -> Table:
        """The partition's table, created (partitioned by ``day(__publish_time)``) or with
        the columns of ``schema`` it lacks added (Iceberg schema update, by name)."""
        with self._lock:
            return self._ensure_table(identifier(partition), schema)

    def _ensure_table(self, ident: tuple[str, str, str], schema: pa.Schema) -> Table:
        table = self._load_or_create(ident, schema)
        if any(table.properties.get(k) != v for k, v in NO_REBASE.items()):
            for _ in range(COMMIT_TRIES):  # a table made before Magnetar set it
                try:
                    table = table.transaction().set_properties(NO_REBASE).commit_transaction()
                    break
                except _commit_failed():
                    table = self.catalog.load_table(ident)
        missing = [f for f in schema if f.name not in _names(table)]
        widened = _widened(table, schema)
        if missing or widened:
            for _ in range(COMMIT_TRIES):
                try:
                    with table.update_schema() as update:
                        update.union_by_name(schema)
                    break
                except _commit_failed():
                    table = self.catalog.load_table(ident)
        return table

    def _load_or_create(self, ident: tuple[str, str, str], schema: pa.Schema) -> Table:
        from pyiceberg.exceptions import (
            NamespaceAlreadyExistsError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        try:
            return self.catalog.load_table(ident)
        except NoSuchTableError:
            pass
        try:
            self.catalog.create_namespace(ident[:2])
        except NamespaceAlreadyExistsError:
            pass
        except Exception:  # another process made it between pyiceberg's check and insert
            if not self.catalog.namespace_exists(ident[:2]):
                raise
        location = f"{self.warehouse}/{'/'.join(ident)}"
        columns, spec = _partitioned_by_day(schema)
        try:  # one metadata version: the schema and its partition spec together
            return self.catalog.create_table(
                ident,
                schema=columns,
                location=location,
                partition_spec=spec,
                properties=TABLE_PROPERTIES,
            )
        except TableAlreadyExistsError:  # another broker made it meanwhile
            return self.catalog.load_table(ident)

    def commit(self, files: SegmentFiles) -> int:
        """Register ``files`` in one append snapshot; returns its id. Idempotent: if the
        table already references them all (a commit whose answer was lost), returns the
        current snapshot and adds nothing — no data file is ever added twice.

        Raises IcebergCommitError when the catalog keeps refusing (another writer wins
        every try) or cannot be reached; the files may then be registered or not: ask
        :meth:`referenced` before deleting them."""
        ident = identifier(files.partition)
        uris = [self.uri(k) for k in files.keys]
        props = {
            SEGMENTS_PROPERTY: json.dumps([files.summary()]),
            OPERATION_PROPERTY: "offload",
        }
        catalog = self.catalog

        def attempt() -> int:
            table = catalog.load_table(ident)
            if FENCE_PROPERTY + files.attempt in table.properties:
                raise IcebergCommitError(
                    f"{ident}: attempt {files.attempt} of segment {files.segment_id} was "
                    "fenced by the segment's next owner; it is not committed"
                )
            present = self._referenced(table, files)
            if present == set(uris):
                return _snapshot_id(table)
            if present:
                raise IcebergCommitError(
                    f"{ident}: {len(present)} of segment {files.segment_id}'s data files "
                    "are in the table and the others are not; not adding any twice"
                )
            try:
                # Duplicates were ruled out above, on the files that can hold these
                # offsets; add_files' own check reads every manifest of the table.
                table.add_files(uris, snapshot_properties=props, check_duplicate_files=False)
            except (OSError, ValueError) as e:
                raise IcebergCommitError(f"cannot commit to {ident}: {e}") from None
            return _snapshot_id(catalog.load_table(ident))

        with self._lock:
            return _retry_lost_commits(ident, attempt)

    def fence(self, files: SegmentFiles) -> None:
        """Shut the attempt ``files.attempt`` (an offload or a registration) out of the
        table for good, for the segment's next owner settling an attempt that another
        broker (stalled, cut off from ZooKeeper) may still be running: the attempt's files
        the table references leave it, and its commit, if it has not landed, never will
        (:meth:`commit` refuses a fenced attempt). The fence is a table property written in
        an overwrite snapshot, so a commit that loaded the table before it loses its race
        and looks again. Durable when this returns; a no-op for an attempt already fenced
        with nothing in the table."""
        from pyiceberg.exceptions import NoSuchTableError

        ident = identifier(files.partition)
        props = {
            SEGMENTS_PROPERTY: json.dumps([files.summary()]),
            OPERATION_PROPERTY: "fence",
        }

        def attempt() -> None:
            try:
                table = self._catalog_now().load_table(ident)
            except NoSuchTableError:
                return  # an attempt's commit needs its table: none was ever made
            uris = {self.uri(k) for k in files.keys}
            doomed = [f for f in self._data_files(table, files) if f.file_path in uris]
            key = FENCE_PROPERTY + files.attempt
            if key in table.properties and not doomed:
                return
            now = int(time.time() * 1000)
            stale = [
                k
                for k, v in table.properties.items()
                if k.startswith(FENCE_PROPERTY) and k != key and _fenced_ms(v) < now - FENCE_KEEP_MS
            ]
            fence = {"segment": f"{files.partition}/{files.segment_id}", "ms": now}
            with table.transaction() as tx:
                tx.set_properties({key: json.dumps(fence)})
                if stale:
                    tx.remove_properties(*stale)
                with tx.update_snapshot(snapshot_properties=props).overwrite() as change:
                    for data_file in doomed:
                        change.delete_data_file(data_file)

        self.catalog  # noqa: B018 - connect before taking the lock
        with self._lock:
            _retry_lost_commits(ident, attempt)

    def referenced(self, files: SegmentFiles) -> set[str]:
        """Which of ``files`` (as URIs) the table's current snapshot references."""
        from pyiceberg.exceptions import NoSuchTableError

        with self._lock:
            try:
                table = self.catalog.load_table(identifier(files.partition))
            except NoSuchTableError:
                return set()
            return self._referenced(table, files)

    def _referenced(self, table: Table, files: SegmentFiles) -> set[str]:
        wanted = {self.uri(k) for k in files.keys}
        return {f.file_path for f in self._data_files(table, files) if f.file_path in wanted}

    @staticmethod
    def _data_files(table: Table, files: SegmentFiles) -> list[Any]:
        """Data files that may hold ``files``' offsets (pruned by partition and offsets)."""
        if table.current_snapshot() is None:
            return []
        where = (
            f"__partition = {partition_index(files.partition)} AND "
            f"__offset >= {files.first_offset} AND __offset <= {files.last_offset}"
        )
        return [task.file for task in table.scan(row_filter=where).plan_files()]

    def remove(self, segments: Iterable[SegmentFiles], operation: str = "retention") -> None:
        """Remove the segments' data files from their tables, one overwrite snapshot per
        table whose summary names them. Durable when this returns: the table no longer
        references them and the objects may be deleted. Files not referenced are skipped."""
        by_table: dict[tuple[str, str, str], list[SegmentFiles]] = {}
        for seg in segments:
            by_table.setdefault(identifier(seg.partition), []).append(seg)
        self.catalog  # noqa: B018 - connect before taking the lock
        with self._lock:
            for ident, segs in by_table.items():
                self._remove(ident, segs, operation)

    def _remove(
        self, ident: tuple[str, str, str], segs: list[SegmentFiles], operation: str
    ) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        props = {
            SEGMENTS_PROPERTY: json.dumps([s.summary() for s in segs]),
            OPERATION_PROPERTY: operation,
        }

        def attempt() -> None:
            try:
                table = self._catalog_now().load_table(ident)
            except NoSuchTableError:
                return
            doomed = list(  # a compacted file is several segments' (listed once)
                {
                    f.file_path: f
                    for seg in segs
                    for f in self._data_files(table, seg)
                    if f.file_path in {self.uri(k) for k in seg.keys}
                }.values()
            )
            if not doomed:
                return
            with (
                table.transaction() as tx,
                tx.update_snapshot(snapshot_properties=props).overwrite() as change,
            ):
                for data_file in doomed:
                    change.delete_data_file(data_file)

        _retry_lost_commits(ident, attempt)

    # -- maintenance -----------------------------------------------------------------------

    def replace(self, segments: list[SegmentFiles], key: str) -> int:
        """Compaction: in one overwrite snapshot (``magnetar.operation``: ``compaction``),
        the table stops referencing the ``segments``' data files and references ``key``,
        which holds exactly their rows; returns the snapshot id. Idempotent: when the table
        references ``key`` already, nothing changes. Raises IcebergCommitError when any of
        the old files is not in the table (nothing is replaced then)."""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        ident = identifier(segments[0].partition)
        uri = self.uri(key)
        props = {
            SEGMENTS_PROPERTY: json.dumps([s.summary() for s in segments]),
            OPERATION_PROPERTY: "compaction",
        }
        catalog = self.catalog
        span = dataclasses.replace(segments[0], last_offset=segments[-1].last_offset, keys=(key,))
        old = {self.uri(k) for seg in segments for k in seg.keys}

        def attempt() -> int:
            table = catalog.load_table(ident)
            if self._referenced(table, span):
                return _snapshot_id(table)
            doomed = {
                f.file_path: f
                for seg in segments
                for f in self._data_files(table, seg)
                if f.file_path in old
            }
            if set(doomed) != old:
                raise IcebergCommitError(
                    f"{ident}: {len(old) - len(doomed)} of the files to compact are not "
                    "in the table; not compacting"
                )
            try:
                added = parquet_file_to_data_file(table.io, table.metadata, uri)
                with (
                    table.transaction() as tx,
                    tx.update_snapshot(snapshot_properties=props).overwrite() as change,
                ):
                    for data_file in doomed.values():
                        change.delete_data_file(data_file)
                    change.append_data_file(added)
            except (OSError, ValueError) as e:
                raise IcebergCommitError(f"cannot compact {ident}: {e}") from None
            return _snapshot_id(catalog.load_table(ident))

        with self._lock:
            return _retry_lost_commits(ident, attempt)

    def expire_snapshots(self, partition: str, older_than_ms: int, keep: int) -> int:
        """Expire the table's snapshots taken before ``older_than_ms`` (epoch ms), except the
        ``keep`` newest and the current one; returns how many went. Metadata only: the data
        files of the current snapshot are untouched (and those of expired snapshots were
        deleted with their segments already)."""
        from pyiceberg.exceptions import NoSuchTableError

        ident = identifier(partition)
        catalog = self.catalog

        def attempt() -> int:
            try:
                table = catalog.load_table(ident)
            except NoSuchTableError:
                return 0
            current = _snapshot_id(table)
            ordered = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
            doomed = [
                s.snapshot_id
                for s in ordered[: max(len(ordered) - keep, 0)]
                if s.timestamp_ms < older_than_ms and s.snapshot_id != current
            ]
            if not doomed:
                return 0
            table.maintenance.expire_snapshots().by_ids(doomed).commit()
            return len(doomed)

        with self._lock:
            return _retry_lost_commits(ident, attempt)

    # -- reading ---------------------------------------------------------------------------

    def describe(self, topic: str) -> dict[str, Any] | None:
        """The table of ``topic`` (a topic or partition path): identifier, location, current
        snapshot, schema; None when it does not exist yet."""
        from pyiceberg.exceptions import NoSuchTableError

        ident = identifier(topic)
        try:
            with self._lock:
                table = self.catalog.load_table(ident)
        except NoSuchTableError:
            return None
        snap = table.current_snapshot()
        return {
            "table": ".".join(ident),
            "catalog": self.kind,
            "location": table.location(),
            "metadataLocation": table.metadata_location,
            "currentSnapshot": None
            if snap is None
            else {
                "id": snap.snapshot_id,
                "timestampMs": snap.timestamp_ms,
                "operation": snap.summary.operation.value if snap.summary else None,
                "summary": dict(snap.summary.additional_properties) if snap.summary else {},
            },
            "snapshots": len(table.snapshots()),
            "schema": [{"name": f.name, "type": str(f.field_type)} for f in table.schema().fields],
            "partitionSpec": [str(f) for f in table.spec().fields],
        }


def _sqlite_catalog(props: dict[str, str]) -> Catalog:
    """pyiceberg's SQL catalog on SQLite, with a connection per use. Its default pool keeps
    idle connections, and an idle one can hold a lock without anyone using it. A stalled
    catalog once showed a hot ``iceberg.db-journal`` while no thread wrote (issue 20); that
    cause is not proven, this takes it away. pyiceberg offers no pool setting, so its engine
    is replaced after it set up its tables. A connection waits up to 30 s for another
    process's lock (an outside reader) before the call fails."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    catalog = SqlCatalog("magnetar", **props)
    catalog.engine.dispose()
    catalog.engine = create_engine(props["uri"], poolclass=NullPool, connect_args={"timeout": 30})
    return catalog


def file_io_properties(store: ObjectStore) -> dict[str, str]:
    """What pyiceberg's FileIO needs to read and write the store (S3 endpoint and keys)."""
    if not isinstance(store, S3ObjectStore):
        return {}
    props = {"s3.region": store.region}
    if store.endpoint:
        props["s3.endpoint"] = store.endpoint
    if store.access_key and store.secret_key:
        props["s3.access-key-id"] = store.access_key
        props["s3.secret-access-key"] = store.secret_key
    return props


def _names(table: Table) -> set[str]:
    return {f.name for f in table.schema().fields}


def _widened(table: Table, schema: pa.Schema) -> bool:
    """True when ``schema`` has an int column the table holds as… int still (int → long)."""
    from pyiceberg.types import IntegerType

    current = {f.name: f.field_type for f in table.schema().fields}
    return any(
        pa.types.is_int64(f.type) and isinstance(current.get(f.name), IntegerType) for f in schema
    )


def _snapshot_id(table: Table) -> int:
    snap = table.current_snapshot()
    return -1 if snap is None else int(snap.snapshot_id)


def _fenced_ms(value: str) -> int:
    try:
        return int(json.loads(value).get("ms", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _retry_lost_commits(ident: tuple[str, str, str], attempt: Callable[[], _T]) -> _T:
    """``attempt()``'s answer, calling it again while another writer wins the commit it
    makes (CommitFailedException): at most COMMIT_TRIES times, 10 ms apart. ``attempt``
    must load the table afresh and decide again each time (what it checked may have
    changed). Raises IcebergCommitError when every try lost; other errors pass through."""
    for _ in range(COMMIT_TRIES):
        try:
            return attempt()
        except _commit_failed():
            time.sleep(0.01)
    raise IcebergCommitError(f"{ident}: {COMMIT_TRIES} commits lost to other writers")


def _partitioned_by_day(schema: pa.Schema) -> tuple[Schema, PartitionSpec]:
    """``schema`` as an Iceberg schema (field ids from 1, in order, as pyiceberg gives a
    new table's) and the partition spec ``day(__publish_time)`` over it."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PARTITION_FIELD_ID_START, PartitionField, PartitionSpec
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyiceberg.transforms import DayTransform

    columns = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
    day = PartitionField(
        source_id=columns.find_field("__publish_time").field_id,
        field_id=PARTITION_FIELD_ID_START,
        transform=DayTransform(),
        name="__publish_time_day",
    )
    return columns, PartitionSpec(day)


def _commit_failed() -> type[Exception]:
    from pyiceberg.exceptions import CommitFailedException

    return CommitFailedException


__all__ = [
    "CATALOG_KINDS",
    "IcebergTables",
    "SegmentFiles",
    "ValueSchema",
    "identifier",
    "table_schema",
]
