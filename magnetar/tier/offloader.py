"""Offloading: a closed segment → one Parquet object plus a manifest, verified.

Each try to offload a segment is an *attempt* with its own id, which the managed ledger
records in the segment record before anything is uploaded. The attempt's objects live under
``<partition path>/<segment id>/<attempt>/`` (``data.parquet`` and ``data.manifest.json``;
a cut-off upload leaves a temporary name beside them), so an abandoned attempt is deleted
by listing exactly its own prefix — never by guessing which objects of a shared bucket are
ours (Pulsar's offloaders name objects by a per-attempt UUID for the same reason). Segments
offloaded before attempts existed keep their old key, ``<partition>/<segment id>.parquet``,
which the segment record names.

With an Iceberg catalog the attempt writes the table's data files instead of
``data.parquet`` (layout 2 of :mod:`magnetar.tier.parquet`): ``iceberg-<day>-<n>.parquet``,
one per run of offsets published on one UTC day (one file for nearly every segment), listed
in order in the manifest's and the record's ``objects``. They are the only copy of the
segment's messages: the tier rebuilds entries from them, the table registers them.

The caller marks the segment OFFLOADED only after
:meth:`Offloader.offload` returns, i.e. after the object was read back and its row count
and checksum matched (DESIGN.md decision 4); on any failure the segment stays local.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from magnetar.core.entries import Entry
from magnetar.storage import SegmentInfo
from magnetar.tier.errors import OffloadVerificationError
from magnetar.tier.object_store import ObjectStore
from magnetar.tier.parquet import entries_to_table, entry_boundaries

# Rows of a segment (tier layout, a piece of it at a time) → the data files' rows instead:
# (stem, rows) each, in offset order; consecutive pieces with one stem go to one file
ToFiles = Callable[[pa.Table], list[tuple[str, pa.Table]]]

MANIFEST_SUFFIX = ".manifest.json"


@dataclass(frozen=True, slots=True)
class Manifest:
    segment_id: int
    partition: str
    object_key: str
    first_offset: int
    last_offset: int
    first_publish_time: int
    last_publish_time: int
    row_count: int
    entry_count: int
    size: int
    sha256: str
    offloaded_ms: int
    # layout 2: every object of the segment in offset order, each {key, rows, size, sha256,
    # firstOffset, lastOffset}; object_key is the first's. Empty: one data.parquet object.
    objects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [str(o["key"]) for o in self.objects] or [self.object_key]

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        return cls(**json.loads(raw))


def object_key(partition: str, segment_id: int, attempt: str | None = None) -> str:
    """The Parquet object of ``attempt``; without one, the key used before attempts."""
    if attempt is None:
        return f"{partition}/{segment_id:020d}.parquet"
    return f"{attempt_prefix(partition, segment_id, attempt)}/data.parquet"


def attempt_prefix(partition: str, segment_id: int, attempt: str) -> str:
    """Every object an attempt writes (temporary ones included) lies under this prefix."""
    return f"{partition}/{segment_id:020d}/{attempt}"


def key_of(partition: str, info: SegmentInfo) -> str:
    """The object an OFFLOADED segment's record names (older records: the pre-attempt key);
    for layout 2, the first of its objects."""
    key = (info.offload or {}).get("key")
    return str(key) if key else object_key(partition, info.segment_id)


def keys_of(partition: str, info: SegmentInfo) -> list[str]:
    """Every object holding an OFFLOADED segment's messages, in offset order."""
    objects = (info.offload or {}).get("objects")
    if objects:
        return [str(k) for k in objects]
    return [key_of(partition, info)]


def manifest_key(object_key: str) -> str:
    return object_key.removesuffix(".parquet") + MANIFEST_SUFFIX


class Offloader:
    """Writes segments to ``store``. Blocking: call from a worker thread."""

    def __init__(self, store: ObjectStore, *, row_group_rows: int = 100_000) -> None:
        self.store = store
        self.row_group_rows = row_group_rows

    def offload(
        self, partition: str, info: SegmentInfo, entries: Iterable[Entry], attempt: str
    ) -> Manifest:
        """:meth:`offload_table` into the tier's own layout (one ``data.parquet``)."""
        return self.offload_table(partition, info, entries, attempt)

    def offload_table(
        self,
        partition: str,
        info: SegmentInfo,
        entries: Iterable[Entry],
        attempt: str,
        to_files: ToFiles | None = None,
    ) -> Manifest:
        """Write, read back and verify under ``attempt``'s prefix; returns the manifest
        (already stored). With ``to_files`` the objects are the files it makes of the rows
        (Iceberg data files, layout 2) instead of one ``data.parquet``.

        The segment goes in pieces of about ``row_group_rows`` messages (never splitting an
        entry), each a row group. Chunks of pieces are unpacked on this thread while a
        second thread makes a piece's rows (``to_files``: the typed decode) and a third
        writes them, so the three overlap on the cores and only a few pieces' rows are held
        at a time.

        When this returns, the object and its manifest are durable in the store and the
        object was read back whole (checksum and row count match). When it raises
        (ObjectStoreUnavailableError, OffloadVerificationError, UnsupportedEntryFormatError),
        the object may or may not be there: the caller must not mark the segment OFFLOADED.
        """
        entries = list(entries)
        key = object_key(partition, info.segment_id, attempt)
        prefix = attempt_prefix(partition, info.segment_id, attempt)
        files = _Files(key if to_files is None else None, prefix)
        make_parts: ToFiles = to_files or _one_file
        rows, first = 0, None
        with (
            ThreadPoolExecutor(1, thread_name_prefix="offload-decode") as decoder,
            ThreadPoolExecutor(1, thread_name_prefix="offload-write") as writer,
        ):
            writing: list[Future[None]] = []
            for chunk in _chunks(_pieces(entries, self.row_group_rows)):
                table = entries_to_table([entry for piece in chunk for entry in piece])
                if first is None and table.num_rows:
                    first = table.column("offset")[0].as_py()
                rows += table.num_rows
                for rows_of_piece in _cut(table, chunk):
                    parts = decoder.submit(make_parts, rows_of_piece)
                    writing.append(writer.submit(_write_when_made, files, parts))
                    if len(writing) > 2:  # at most two pieces ahead of the writer
                        writing.pop(0).result()
            for done in writing:
                done.result()
        held = info.end_offset - info.first_offset
        if rows != held or (held and first != info.first_offset):
            raise OffloadVerificationError(
                f"segment {info.segment_id} of {partition} holds offsets {info.first_offset}.."
                f"{info.last_offset} but {rows} messages were read from it"
            )
        written = files.close()
        objects = [
            {"key": k, "rows": n, "size": len(data), "sha256": _sha(data)} for k, n, data in written
        ]
        manifest = Manifest(
            segment_id=info.segment_id,
            partition=partition,
            object_key=written[0][0],
            first_offset=info.first_offset,
            last_offset=info.last_offset,
            first_publish_time=info.first_publish_time,
            last_publish_time=info.max_publish_time,
            row_count=rows,
            entry_count=len(entries),
            size=sum(len(data) for _, _, data in written),
            sha256=str(objects[0]["sha256"]),
            offloaded_ms=int(time.time() * 1000),
            objects=objects if to_files is not None else [],
        )
        if sum(n for _, n, _ in written) != rows:
            raise OffloadVerificationError(
                f"segment {info.segment_id} of {partition}: the data files hold "
                f"{sum(n for _, n, _ in written)} rows, the segment {rows}"
            )
        for k, _, data in written:
            self.store.put(k, data)
        self.verify(manifest)
        self.store.put(manifest_key(key), manifest.to_bytes())
        return manifest

    def _parquet(self, table: pa.Table) -> bytes:
        """Row groups of about ``row_group_rows`` rows, never splitting an entry."""
        sink = io.BytesIO()
        cuts = [*entry_boundaries(table, self.row_group_rows), table.num_rows]
        with pq.ParquetWriter(
            sink,
            table.schema,
            compression="zstd",
            write_statistics=True,
            use_dictionary=_dictionary_columns(table),
            sorting_columns=[pq.SortingColumn(0)],  # rows are in offset order: say so
        ) as out:
            for start, end in itertools.pairwise(cuts):
                if end > start:
                    out.write_table(table.slice(start, end - start), row_group_size=end - start)
        return sink.getvalue()

    def compact(self, keys: list[str], key: str) -> dict[str, Any]:
        """Rewrite the objects ``keys`` (neighbouring segments' Iceberg data files, in offset
        order) as the one object ``key``, verified by read-back; returns its
        ``{key, rows, size, sha256}``. Files of older schema versions get the newer
        columns as nulls."""
        tables = []
        for k in keys:
            with self.store.open(k) as f:
                tables.append(pq.read_table(f))
        table = pa.concat_tables(tables, promote_options="permissive")
        data = self._parquet(table)
        done = {"key": key, "rows": table.num_rows, "size": len(data), "sha256": _sha(data)}
        self.store.put(key, data)
        self._verify(key, str(done["sha256"]), table.num_rows)
        return done

    def verify(self, manifest: Manifest) -> None:
        """Read the objects back: same bytes (checksum) and the row count Parquet reports."""
        for o in manifest.objects:
            self._verify(str(o["key"]), str(o["sha256"]), int(o["rows"]))
        if not manifest.objects:
            self._verify(manifest.object_key, manifest.sha256, manifest.row_count)

    def _verify(self, key: str, sha256: str, row_count: int) -> None:
        data = self.store.get(key)
        if _sha(data) != sha256:
            raise OffloadVerificationError(f"{key}: checksum differs after upload")
        rows = pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
        if rows != row_count:
            raise OffloadVerificationError(f"{key}: {rows} rows read back, {row_count} written")

    def delete(self, key: str) -> None:
        """Delete an object and its manifest (missing ones are fine)."""
        self.store.delete(key)
        self.store.delete(manifest_key(key))

    def delete_attempt(self, partition: str, segment_id: int, attempt: str) -> None:
        """Delete everything ``attempt`` wrote, finished or not (missing is fine)."""
        for key in self.store.list(attempt_prefix(partition, segment_id, attempt)):
            self.store.delete(key)


# Entries unpacked at once at least (a chunk of pieces): Pulsar's batches are split together
# with numpy from 100 batches on (batch_arrays.MIN_BATCHES), one by one in Python below
_UNPACK_ENTRIES = 256


def _one_file(table: pa.Table) -> list[tuple[str, pa.Table]]:
    return [("", table)]


def _pieces(entries: list[Entry], target_rows: int) -> Iterator[list[Entry]]:
    """``entries`` in runs of about ``target_rows`` messages: a run ends at the first entry
    end at or past it (the row groups ``entry_boundaries`` makes). One empty run when there
    are no entries, so an empty segment still gets its object."""
    start, rows = 0, 0
    for i, entry in enumerate(entries):
        if rows >= target_rows:
            yield entries[start:i]
            start, rows = i, 0
        rows += entry.count
    if start < len(entries) or not entries:
        yield entries[start:]


def _chunks(pieces: Iterator[list[Entry]]) -> Iterator[list[list[Entry]]]:
    """Consecutive pieces unpacked together, at least :data:`_UNPACK_ENTRIES` entries a
    chunk (but the last): a codec splits many batches at once far faster than a few."""
    chunk: list[list[Entry]] = []
    held = 0
    for piece in pieces:
        chunk.append(piece)
        held += len(piece)
        if held >= _UNPACK_ENTRIES:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


def _cut(table: pa.Table, chunk: list[list[Entry]]) -> list[pa.Table]:
    """The rows of ``chunk`` (its pieces' entries, unpacked) cut back into its pieces."""
    sizes = [sum(entry.count for entry in piece) for piece in chunk]
    if sum(sizes) != table.num_rows:
        return [table]  # the offload's own row check reports it
    out, at = [], 0
    for size in sizes:
        out.append(table.slice(at, size))
        at += size
    return out


def _write_when_made(files: _Files, parts: Future[list[tuple[str, pa.Table]]]) -> None:
    files.write(parts.result())


class _Files:
    """The Parquet files an offload writes, each a run of row groups in offset order.
    ``single``: every piece goes to that one key (the tier's own layout); otherwise a piece
    named ``stem`` goes to ``<prefix>/<stem>-<n>.parquet``, a new file (n + 1) each time the
    stem differs from the last piece's."""

    def __init__(self, single: str | None, prefix: str) -> None:
        self.single, self.prefix = single, prefix
        self.done: list[tuple[str, int, bytes]] = []  # key, rows, bytes
        self.stem: str | None = None
        self.key, self.rows = "", 0
        self.sink: io.BytesIO | None = None
        self.out: pq.ParquetWriter | None = None

    def write(self, parts: list[tuple[str, pa.Table]]) -> None:
        for stem, rows in parts:
            if self.out is None or stem != self.stem:
                self._finish()
                self.stem = stem
                n = len(self.done)
                self.key = self.single or f"{self.prefix}/{stem}-{n}.parquet"
                self.sink, self.rows = io.BytesIO(), 0
                self.out = pq.ParquetWriter(
                    self.sink,
                    rows.schema,
                    compression="zstd",
                    write_statistics=True,
                    use_dictionary=_dictionary_columns(rows),
                    sorting_columns=[pq.SortingColumn(0)],  # rows are in offset order: say so
                )
            if not rows.schema.equals(self.out.schema):  # pieces read by different paths
                rows = rows.cast(self.out.schema)
            if self.single is not None or rows.num_rows:
                self.out.write_table(rows, row_group_size=max(rows.num_rows, 1))
                self.rows += rows.num_rows

    def _finish(self) -> None:
        if self.out is not None and self.sink is not None:
            self.out.close()
            self.done.append((self.key, self.rows, self.sink.getvalue()))
        self.out, self.sink = None, None

    def close(self) -> list[tuple[str, int, bytes]]:
        self._finish()
        return self.done


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# rows of a file's first piece that decide which of its columns get a dictionary
_SAMPLE_ROWS = 4096


def _dictionary_columns(rows: pa.Table) -> list[str]:
    """Leaf column paths worth a dictionary: those whose values repeat, at most half of
    them distinct in the first :data:`_SAMPLE_ROWS` rows (and the keys and values of maps,
    mostly property names and a few values). A column of distinct values (offsets, ids,
    prices, the message values) would be hashed into a dictionary until Parquet gives up on
    it at 1 MiB: for typed JSON rows that made the write half as slow again and the file
    half as large again (docs/benchmarks.md)."""
    sample = rows.slice(0, _SAMPLE_ROWS)
    paths: list[str] = []

    def walk(path: str, values: pa.ChunkedArray) -> None:
        if pa.types.is_struct(values.type):
            for i, child in enumerate(values.type):
                walk(f"{path}.{child.name}", pc.struct_field(values, [i]))
        elif pa.types.is_map(values.type):
            paths.extend((f"{path}.key_value.key", f"{path}.key_value.value"))
        elif _is_list(values.type):
            walk(f"{path}.list.element", pc.list_flatten(values))
        elif _repeats(values):
            paths.append(path)

    for name in sample.column_names:
        walk(name, sample.column(name))
    return paths


def _is_list(data_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
    )


def _repeats(values: pa.ChunkedArray) -> bool:
    held = len(values) - values.null_count
    try:
        return held == 0 or 2 * pc.count_distinct(values).as_py() <= held
    except pa.ArrowNotImplementedError:  # a type Arrow cannot count (a dictionary already)
        return True
