"""Batch payloads: build and split, and the single-message view of a non-batched entry."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocols.pulsar import compression
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import (
    BatchedMessage,
    build_batch,
    is_batch,
    split_batch,
    unpack,
)
from magnetar.protocols.pulsar.errors import BatchFormatError

from .strategies import payload_bytes, single_metadatas

batches = st.lists(st.builds(BatchedMessage, single_metadatas, payload_bytes), max_size=10)


def with_size(message: BatchedMessage) -> BatchedMessage:
    metadata = pb.SingleMessageMetadata()
    metadata.CopyFrom(message.metadata)
    metadata.payload_size = len(message.payload)
    return BatchedMessage(metadata, message.payload)


@given(batches)
def test_build_then_split_round_trip(messages: list[BatchedMessage]) -> None:
    data = build_batch(messages)
    assert split_batch(data, len(messages)) == [with_size(m) for m in messages]
    assert split_batch(data) == [with_size(m) for m in messages]


def test_batch_layout_is_the_documented_one() -> None:
    single = pb.SingleMessageMetadata(partition_key="k", payload_size=3)
    raw = single.SerializeToString()
    message = BatchedMessage(pb.SingleMessageMetadata(partition_key="k"), b"abc")
    assert build_batch([message]) == struct.pack(">I", len(raw)) + raw + b"abc"


@given(batches.filter(bool), st.sampled_from(compression.CODECS))
def test_unpack_decompresses_and_splits(messages: list[BatchedMessage], codec: int) -> None:
    data = build_batch(messages)
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=0,
        num_messages_in_batch=len(messages),
        compression=codec,  # type: ignore[arg-type]
        uncompressed_size=len(data),
    )
    assert unpack(metadata, compression.compress(codec, data)) == [with_size(m) for m in messages]


def test_unpack_turns_a_single_message_into_its_single_metadata() -> None:
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=5,
        publish_time=1,
        properties=[pb.KeyValue(key="a", value="b")],
        partition_key="key",
        event_time=99,
    )
    assert not is_batch(metadata)
    [message] = unpack(metadata, b"body")
    assert message.payload == b"body"
    assert message.metadata.partition_key == "key"
    assert message.metadata.event_time == 99
    assert message.metadata.sequence_id == 5
    assert message.metadata.payload_size == 4
    assert [(p.key, p.value) for p in message.metadata.properties] == [("a", "b")]


def test_a_batch_of_one_is_still_a_batch() -> None:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=0, num_messages_in_batch=1
    )
    assert is_batch(metadata)


BATCH = build_batch(
    [
        BatchedMessage(pb.SingleMessageMetadata(), b"one"),
        BatchedMessage(pb.SingleMessageMetadata(), b"two"),
    ]
)


@pytest.mark.parametrize(
    ("data", "count"),
    [
        pytest.param(BATCH, 3, id="fewer-than-announced"),
        pytest.param(BATCH, 1, id="more-than-announced"),
        pytest.param(BATCH + b"\x00", None, id="trailing-byte"),
        pytest.param(BATCH[:-1], 2, id="payload-cut-short"),
        pytest.param(b"\x00\x00", 1, id="size-cut-short"),
        pytest.param(b"\x00\x00\x00\x09\x18", 1, id="metadata-overruns"),
        pytest.param(b"\x00\x00\x00\x01\xff", 1, id="metadata-garbage"),
        pytest.param(b"\x00\x00\x00\x00", 1, id="metadata-without-payload-size"),
    ],
)
def test_malformed_batches(data: bytes, count: int | None) -> None:
    with pytest.raises(BatchFormatError):
        split_batch(data, count)
