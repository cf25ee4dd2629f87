"""The batches of many entries split at once into Arrow columns, with numpy.

:func:`~magnetar.protocols.pulsar.batch_columns.split_columns` walks one batch message by
message in Python, ~2 µs a message: most of what an offload spent before Parquet. Here the
batches of a whole segment are walked together: step *k* reads the *k*-th message of every
batch that still has one, and each step is a few dozen numpy operations over all those
batches at once (a batch's messages must be read in order, since each one's size says where
the next starts; different batches need not be). No Python object is made per message:
values, keys and properties are cut from the batches' bytes by Arrow ``take`` over offsets.

Only what the clients write takes this path: SingleMessageMetadata tags of one byte for the
fields pulsar_api.proto defines, varints of at most 64 bits, each property written as
``KeyValue{key, value}`` with lengths under 128, keys and properties that are UTF-8, no name
twice in one message's properties, sequence ids below 2**63, event times that fit a
microsecond timestamp. A batch with anything else, or with any error, is *not split here*
(``fast`` False) and its caller splits it with ``split_columns``, which reads it (or fails)
exactly as protobuf does. When fewer than :data:`MIN_BATCHES` batches still have messages the
rest are left to ``split_columns`` too: a step costs about as much for a few batches as for
thousands, so a long batch among short ones is cheaper walked in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.protocols.pulsar.batch_columns import (
    TAG_COMPACTED_OUT,
    TAG_EVENT_TIME,
    TAG_KEY_B64_ENCODED,
    TAG_KV_KEY,
    TAG_KV_VALUE,
    TAG_NULL_PARTITION_KEY,
    TAG_NULL_VALUE,
    TAG_ORDERING_KEY,
    TAG_PARTITION_KEY,
    TAG_PAYLOAD_SIZE,
    TAG_PROPERTIES,
    TAG_SEQUENCE_ID,
)

MIN_BATCHES = 100
"""Below this many batches with messages left, a step costs more per message than Python."""

_INT32_MAX = 0x7FFFFFFF
_INT63 = 1 << 63
_MAX_EVENT_MS = (_INT63 - 1) // 1000  # beyond it the tier's microsecond timestamp overflows
_PAD = 16  # zero bytes after the batches, so every gather of 10 bytes stays in the buffer
_TEN = np.arange(10, dtype=np.int64)
_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_VARINT, _DELIMITED = 1, 2
_KIND = np.zeros(256, np.int8)  # what follows each one-byte tag; 0: not for this path
for _tag in (
    TAG_PAYLOAD_SIZE,
    TAG_COMPACTED_OUT,
    TAG_EVENT_TIME,
    TAG_KEY_B64_ENCODED,
    TAG_SEQUENCE_ID,
    TAG_NULL_VALUE,
    TAG_NULL_PARTITION_KEY,
):
    _KIND[_tag] = _VARINT
for _tag in (TAG_PROPERTIES, TAG_PARTITION_KEY, TAG_ORDERING_KEY):
    _KIND[_tag] = _DELIMITED
MAP = pa.map_(pa.string(), pa.string())


@dataclass(slots=True)
class SplitBatches:
    """The messages of the batches split here (``fast``), in batch order, one item each:
    what ``split_columns`` gives for those batches, as Arrow arrays."""

    fast: np.ndarray[Any, np.dtype[np.bool_]]
    values: pa.Array  # binary
    keys: pa.Array  # string, null: no partition key
    properties: pa.Array  # map<string, string>
    event_times: pa.Array  # int64 ms, null: none
    sequence_ids: pa.Array  # int64


@dataclass(slots=True)
class _Messages:
    """What each step read: one item per message, in step order."""

    batch: list[np.ndarray[Any, Any]]
    index: list[np.ndarray[Any, Any]]
    value_start: list[np.ndarray[Any, Any]]
    value_end: list[np.ndarray[Any, Any]]
    key_start: list[np.ndarray[Any, Any]]  # -1: no key
    key_end: list[np.ndarray[Any, Any]]
    event_time: list[np.ndarray[Any, Any]]  # -1: none
    sequence_id: list[np.ndarray[Any, Any]]  # -1: none
    # one item per property: its message (batch, index) and where its KeyValue lies
    property_batch: list[np.ndarray[Any, Any]]
    property_index: list[np.ndarray[Any, Any]]
    property_start: list[np.ndarray[Any, Any]]
    property_end: list[np.ndarray[Any, Any]]

    @classmethod
    def empty(cls) -> _Messages:
        return cls([], [], [], [], [], [], [], [], [], [], [], [])


def split_batches(
    datas: Sequence[bytes | memoryview],
    counts: list[int],
    first_sequence_ids: list[int],
    *,
    min_batches: int | None = None,
) -> SplitBatches:
    """Split the uncompressed batch payloads ``datas`` (each announcing ``counts[i]``
    messages, numbered from ``first_sequence_ids[i]``) where this path can; never raises for
    bad bytes (such a batch is simply not ``fast``). Tests lower ``min_batches`` (default
    :data:`MIN_BATCHES`)."""
    if min_batches is None:
        min_batches = MIN_BATCHES
    n = len(datas)
    lengths = np.fromiter(map(len, datas), np.int64, n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = np.frombuffer(b"".join([*datas, bytes(_PAD)]), np.uint8)  # one copy
    count = np.array(counts, np.int64)
    first = np.array([s if 0 <= s < 1 << 62 else -1 for s in first_sequence_ids], np.int64)
    fast = (count > 0) & (first >= 0) & (count <= lengths)
    if int(fast.sum()) < min_batches:
        fast[:] = False
    read = _walk(buf, starts, ends, count, fast, min_batches)
    return _columns(buf, count, first, fast, read)


def _walk(
    buf: np.ndarray[Any, Any],
    starts: np.ndarray[Any, Any],
    ends: np.ndarray[Any, Any],
    count: np.ndarray[Any, Any],
    fast: np.ndarray[Any, Any],
    min_batches: int,
) -> _Messages:
    """Read message after message of every ``fast`` batch; a batch found unusual (or
    abandoned, see MIN_BATCHES) is set not ``fast``."""
    out = _Messages.empty()
    pos = starts.copy()
    done = np.zeros(len(starts), np.int64)
    active = np.flatnonzero(fast)
    while active.size:
        if active.size < min_batches:
            fast[active] = False
            break
        p, end = pos[active], ends[active]
        head = buf[p[:, None] + _TEN[:4]].astype(np.int64)
        meta_start = p + 4
        meta_end = meta_start + (head[:, 0] << 24 | head[:, 1] << 16 | head[:, 2] << 8 | head[:, 3])
        ok = meta_end <= end
        fields = _metadata(buf, meta_start, np.where(ok, meta_end, meta_start), ok)
        value_end = meta_end + fields.size
        ok &= value_end <= end
        fast[active[~ok]] = False
        keep = np.flatnonzero(ok)
        batch = active[keep]
        out.batch.append(batch)
        out.index.append(done[batch])
        out.value_start.append(meta_end[keep])
        out.value_end.append(value_end[keep])
        out.key_start.append(fields.key_start[keep])
        out.key_end.append(fields.key_end[keep])
        out.event_time.append(fields.event_time[keep])
        out.sequence_id.append(fields.sequence_id[keep])
        if fields.property_message.size:
            owner = active[fields.property_message]
            out.property_batch.append(owner)
            out.property_index.append(done[owner])
            out.property_start.append(fields.property_start)
            out.property_end.append(fields.property_end)
        pos[batch] = value_end[keep]
        done[batch] += 1
        left = done[batch] < count[batch]
        # a batch whose bytes ran out before its count, or that has bytes after it, is
        # left to split_columns, which says which it is
        fast[batch[left & (pos[batch] >= ends[batch])]] = False
        fast[batch[~left & (pos[batch] != ends[batch])]] = False
        active = batch[left & (pos[batch] < ends[batch])]
    return out


@dataclass(slots=True)
class _Fields:
    size: np.ndarray[Any, Any]
    key_start: np.ndarray[Any, Any]
    key_end: np.ndarray[Any, Any]
    event_time: np.ndarray[Any, Any]
    sequence_id: np.ndarray[Any, Any]
    property_message: np.ndarray[Any, Any]  # which of the messages each property is of
    property_start: np.ndarray[Any, Any]
    property_end: np.ndarray[Any, Any]


def _metadata(
    buf: np.ndarray[Any, Any],
    start: np.ndarray[Any, Any],
    end: np.ndarray[Any, Any],
    ok: np.ndarray[Any, Any],
) -> _Fields:
    """The fields of the SingleMessageMetadata at ``buf[start[i]:end[i]]`` of each message;
    clears ``ok`` of a message whose metadata this path does not read."""
    m = len(start)
    size = np.full(m, -1, np.int64)
    key_start = np.full(m, -1, np.int64)
    key_end = np.full(m, -1, np.int64)
    event_time = np.full(m, -1, np.int64)
    sequence_id = np.full(m, -1, np.int64)
    owners, property_starts, property_ends = [], [], []
    cur = start.copy()
    live = np.flatnonzero(cur < end)
    while live.size:
        at = cur[live]
        tag = buf[at]
        kind = _KIND[tag]
        value, after, good = _varints(buf, at + 1)
        delimited = kind == _DELIMITED
        good &= (kind != 0) & (~delimited | (value <= np.uint64(_INT32_MAX)))
        stop = np.where(delimited, after + value.astype(np.int64, copy=False), after)
        good &= stop <= end[live]
        ok[live[~good]] = False
        sel = np.flatnonzero(good)
        live, tag, value, after, stop = live[sel], tag[sel], value[sel], after[sel], stop[sel]
        for field_tag, column, limit in (
            (TAG_PAYLOAD_SIZE, size, _INT32_MAX),
            (TAG_EVENT_TIME, event_time, _MAX_EVENT_MS),
            (TAG_SEQUENCE_ID, sequence_id, _INT63 - 1),
        ):
            hit = tag == field_tag
            if hit.any():
                big = hit & (value > np.uint64(limit))
                ok[live[big]] = False
                column[live[hit]] = value[hit].astype(np.int64)
        hit = tag == TAG_PARTITION_KEY
        key_start[live[hit]] = after[hit]
        key_end[live[hit]] = stop[hit]
        hit = tag == TAG_PROPERTIES
        if hit.any():
            owners.append(live[hit])
            property_starts.append(after[hit])
            property_ends.append(stop[hit])
        cur[live] = stop
        live = live[stop < end[live]]
    ok &= size >= 0
    empty = np.zeros(0, np.int64)
    return _Fields(
        size=np.maximum(size, 0),
        key_start=key_start,
        key_end=key_end,
        event_time=event_time,
        sequence_id=sequence_id,
        property_message=np.concatenate(owners) if owners else empty,
        property_start=np.concatenate(property_starts) if owners else empty,
        property_end=np.concatenate(property_ends) if owners else empty,
    )


def _varints(
    buf: np.ndarray[Any, Any], at: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The varint at each of ``at`` (uint64), where each ends, and whether each is one of at
    most 10 bytes and 64 bits (protobuf's limits; ``split_columns`` leaves others to it).
    Varints of at most three bytes (sizes, lengths, most sequence ids) are read byte by byte
    over the whole array; when any is longer, every one is read as ten bytes."""
    first = buf[at]
    if (first < 0x80).all():
        return first.astype(np.uint64), at + 1, np.ones(len(at), np.bool_)
    second, third = buf[at + 1], buf[at + 2]
    one, two = first < 0x80, second < 0x80
    if (one | two | (third < 0x80)).all():
        low = (first & 0x7F).astype(np.uint64)
        mid = (second & 0x7F).astype(np.uint64) << np.uint64(7)
        value = np.where(
            one, low, np.where(two, low | mid, low | mid | third.astype(np.uint64) << np.uint64(14))
        )
        length = np.where(one, 1, np.where(two, 2, 3))
        return value, at + length, np.ones(len(at), np.bool_)
    raw = buf[at[:, None] + _TEN]
    last = raw < 0x80
    length = last.argmax(axis=1) + 1
    good = last.any(axis=1) & ~((length == 10) & (raw[:, 9] > 1))
    parts = (raw & 0x7F).astype(np.uint64) << _SHIFTS
    parts[_TEN[None, :] >= length[:, None]] = 0
    return parts.sum(axis=1, dtype=np.uint64), at + length, good


# -- the messages read, as columns ---------------------------------------------------------------


def _columns(
    buf: np.ndarray[Any, Any],
    count: np.ndarray[Any, Any],
    first: np.ndarray[Any, Any],
    fast: np.ndarray[Any, Any],
    read: _Messages,
) -> SplitBatches:
    """The messages of the ``fast`` batches in row order; a batch whose keys or properties
    are not what this path reads (not UTF-8, a name twice) is set not ``fast`` first."""
    if read.batch:
        _check_properties(buf, fast, read)
        _check_text(buf, fast, read)
    rows_before = np.cumsum(np.where(fast, count, 0)) - np.where(fast, count, 0)
    total = int(np.where(fast, count, 0).sum())
    if not read.batch or total == 0:
        return _nothing(fast)
    batch = np.concatenate(read.batch)
    keep = fast[batch]
    batch = batch[keep]
    row = rows_before[batch] + np.concatenate(read.index)[keep]

    def by_row(parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        out = np.empty(total, np.int64)
        out[row] = np.concatenate(parts)[keep]
        return out

    value_start, value_end = by_row(read.value_start), by_row(read.value_end)
    key_start, key_end = by_row(read.key_start), by_row(read.key_end)
    has_key = key_start >= 0
    key_start = np.where(has_key, key_start, value_start)  # empty, and in order
    key_end = np.where(has_key, key_end, value_start)
    event_time = by_row(read.event_time)
    sequence_id = by_row(read.sequence_id)
    numbered = np.empty(total, np.int64)
    numbered[row] = first[batch] + np.concatenate(read.index)[keep]
    if has_key.any():
        keys = _cut(buf, key_start, key_end, pa.string())
        keys = pc.if_else(pa.array(has_key), keys, pa.scalar(None, pa.string()))
    else:
        keys = pa.nulls(total, pa.string())
    return SplitBatches(
        fast=fast,
        values=_cut(buf, value_start, value_end, pa.binary()),
        keys=keys,
        properties=_property_map(buf, fast, rows_before, total, read),
        event_times=pa.array(event_time, pa.int64(), mask=event_time < 0),
        sequence_ids=pa.array(np.where(sequence_id >= 0, sequence_id, numbered), pa.int64()),
    )


def _nothing(fast: np.ndarray[Any, Any]) -> SplitBatches:
    return SplitBatches(
        fast=fast,
        values=pa.array([], pa.binary()),
        keys=pa.array([], pa.string()),
        properties=pa.array([], MAP),
        event_times=pa.array([], pa.int64()),
        sequence_ids=pa.array([], pa.int64()),
    )


def _cut(
    buf: np.ndarray[Any, Any],
    start: np.ndarray[Any, Any],
    end: np.ndarray[Any, Any],
    data_type: pa.DataType,
) -> pa.Array:
    """The byte ranges ``[start[i], end[i])`` of ``buf`` as one array: an array over the
    whole buffer whose odd items are the gaps between the ranges (sorted first when they are
    not in order), then its even items taken (Arrow copies each range once, in C)."""
    if len(start) == 0:
        return pa.array([], data_type)
    order = None
    if len(start) > 1 and bool((start[1:] < end[:-1]).any()):
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    bounds = np.empty(2 * len(start), np.int64)
    bounds[0::2], bounds[1::2] = start, end
    large = pa.large_string() if data_type == pa.string() else pa.large_binary()
    spans = pa.Array.from_buffers(
        large, max(len(bounds) - 1, 0), [None, pa.py_buffer(bounds), pa.py_buffer(buf)]
    )
    taken = spans.take(pa.array(np.arange(0, len(bounds), 2, dtype=np.int64)))
    if order is not None:
        taken = taken.take(pa.array(np.argsort(order)))
    return taken.cast(data_type)


def _properties_of(
    buf: np.ndarray[Any, Any], read: _Messages
) -> tuple[np.ndarray[Any, Any], ...] | None:
    """(batch, index, name start, name end, value start, value end, well-formed) of every
    property read, or None when there is none."""
    if not read.property_batch:
        return None
    batch = np.concatenate(read.property_batch)
    index = np.concatenate(read.property_index)
    start = np.concatenate(read.property_start)
    end = np.concatenate(read.property_end)
    top = len(buf) - 1
    name_len = buf[np.minimum(start + 1, top)].astype(np.int64)
    mid = np.minimum(start + 2 + name_len, top)
    value_len = buf[np.minimum(mid + 1, top)].astype(np.int64)
    good = (
        (end - start >= 4)
        & (buf[np.minimum(start, top)] == TAG_KV_KEY)
        & (name_len < 0x80)
        & (buf[mid] == TAG_KV_VALUE)
        & (value_len < 0x80)
        & (mid + 2 + value_len == end)
    )
    return batch, index, start + 2, mid, mid + 2, end, good


def _check_properties(
    buf: np.ndarray[Any, Any], fast: np.ndarray[Any, Any], read: _Messages
) -> None:
    """Not ``fast``: a batch with a property in another form, or a name twice in a message
    (protobuf's last value wins there, in the first one's place)."""
    found = _properties_of(buf, read)
    if found is None:
        return
    batch, index, name_start, name_end, _, _, good = found
    fast[batch[~good]] = False
    if len(batch) < 2:
        return
    names = _cut(buf, np.where(good, name_start, 0), np.where(good, name_end, 0), pa.binary())
    # A repeated (message, name) pair: sort by message then name, compare neighbours.
    message = batch * (int(index.max()) + 1) + index
    table = pa.table({"message": message, "name": names})
    order = pc.sort_indices(table, sort_keys=[("message", "ascending"), ("name", "ascending")])
    message, names = message[order.to_numpy()], names.take(order)
    same = (message[1:] == message[:-1]) & pc.equal(names[1:], names[:-1]).to_numpy(
        zero_copy_only=False
    )
    twice = np.flatnonzero(same)
    fast[(message[twice] // (int(index.max()) + 1))] = False


def _check_text(buf: np.ndarray[Any, Any], fast: np.ndarray[Any, Any], read: _Messages) -> None:
    """Not ``fast``: batches with a key, property name or value that is not UTF-8 (rare:
    then each text of that kind is tried in Python to find the batches)."""
    batch = np.concatenate(read.batch)
    spans = [(batch, np.concatenate(read.key_start), np.concatenate(read.key_end))]
    found = _properties_of(buf, read)
    if found is not None:
        owner, _, name_start, name_end, value_start, value_end, good = found
        spans.append((owner[good], name_start[good], name_end[good]))
        spans.append((owner[good], value_start[good], value_end[good]))
    for owner, start, end in spans:
        has = (start >= 0) & fast[owner]
        if not has.any():
            continue
        text = _cut(buf, start[has], end[has], pa.binary())
        try:
            text.cast(pa.string())
        except pa.ArrowInvalid:
            fast[owner[has][[not _utf8(t) for t in text.to_pylist()]]] = False


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _property_map(
    buf: np.ndarray[Any, Any],
    fast: np.ndarray[Any, Any],
    rows_before: np.ndarray[Any, Any],
    total: int,
    read: _Messages,
) -> pa.Array:
    found = _properties_of(buf, read)
    offsets = np.zeros(total + 1, np.int32)
    if found is None:
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), empty, empty)
    batch, index, name_start, name_end, value_start, value_end, _ = found
    keep = fast[batch]
    row = rows_before[batch[keep]] + index[keep]
    order = np.argsort(row, kind="stable")  # by message, each message's in the order written
    row = row[order]
    names = _cut(buf, name_start[keep][order], name_end[keep][order], pa.string())
    values = _cut(buf, value_start[keep][order], value_end[keep][order], pa.string())
    offsets[1:] = np.cumsum(np.bincount(row, minlength=total))
    return pa.MapArray.from_arrays(pa.array(offsets), names, values)
