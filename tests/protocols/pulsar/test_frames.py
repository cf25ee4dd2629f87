"""Byte-level tests of the Pulsar framing: round trips, incremental decoding, bad input."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import (
    ChecksumError,
    FrameTooLargeError,
    MalformedFrameError,
    ProtocolError,
)
from magnetar.protocols.pulsar.frames import (
    MAGIC_BROKER_ENTRY_METADATA,
    Frame,
    FrameDecoder,
    decode_frame,
    encode_command,
    encode_payload_command,
    encode_raw_payload_command,
    pack_payload,
    parse_payload,
)

from .strategies import T, metadatas, payload_bytes, payload_commands, simple_commands

SEND = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=7, sequence_id=42))
METADATA = pb.MessageMetadata(producer_name="p", sequence_id=42, publish_time=1)


def frame_bytes(command: pb.BaseCommand, extra: bytes) -> bytes:
    """A frame with ``extra`` after the command, built by hand (no encoder involved)."""
    body = command.SerializeToString()
    return struct.pack(">II", 4 + len(body) + len(extra), len(body)) + body + extra


def send_frame(payload: bytes = b"hello") -> bytes:
    return encode_payload_command(SEND, METADATA, payload)


# --- round trips ----------------------------------------------------------------------------


@given(simple_commands)
def test_simple_command_round_trip(command: pb.BaseCommand) -> None:
    frame = decode_frame(encode_command(command))
    assert frame.command == command
    assert frame.payload is None


@given(payload_commands, metadatas, payload_bytes)
def test_payload_command_round_trip(
    command: pb.BaseCommand, metadata: pb.MessageMetadata, data: bytes
) -> None:
    encoded = encode_payload_command(command, metadata, data)
    frame = decode_frame(encoded)
    assert frame.command == command
    assert frame.payload is not None
    assert frame.payload.metadata == metadata
    assert frame.payload.data == data
    assert frame.payload.raw_metadata == metadata.SerializeToString()
    assert frame.payload.raw == pack_payload(metadata, data)
    assert frame.payload.checksum == crc32c.crc32c(pack_payload(metadata, data))


def test_payload_layout_is_the_documented_one() -> None:
    encoded = send_frame(b"xyz")
    command = SEND.SerializeToString()
    metadata = METADATA.SerializeToString()
    span = struct.pack(">I", len(metadata)) + metadata + b"xyz"
    expected = (
        struct.pack(">II", 4 + len(command) + 6 + len(span), len(command))
        + command
        + struct.pack(">HI", 0x0E01, crc32c.crc32c(span))
        + span
    )
    assert encoded == expected


def test_raw_payload_is_forwarded_without_reencoding() -> None:
    received = decode_frame(send_frame(b"stored as received"))
    assert received.payload is not None
    stored = bytes(received.payload.raw)
    message = pb.BaseCommand(
        type=T.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=3, message_id=pb.MessageIdData(ledger_id=1, entry_id=2)
        ),
    )
    delivered = decode_frame(encode_raw_payload_command(message, stored))
    assert delivered.payload is not None
    assert delivered.payload.raw == stored
    assert delivered.payload.checksum == received.payload.checksum


def test_parse_payload_reads_stored_bytes_and_checks_their_crc() -> None:
    raw = pack_payload(METADATA, b"data")
    payload = parse_payload(raw, checksum=crc32c.crc32c(raw))
    assert payload.metadata == METADATA
    assert payload.data == b"data"
    with pytest.raises(MalformedFrameError):
        parse_payload(raw, checksum=crc32c.crc32c(raw) ^ 1)


def test_frame_without_checksum_is_accepted() -> None:
    frame = decode_frame(frame_bytes(SEND, pack_payload(METADATA, b"old client")))
    assert frame.payload is not None
    assert frame.payload.checksum is None
    assert frame.payload.data == b"old client"


def test_broker_entry_metadata_prefix_is_accepted() -> None:
    entry_metadata = pb.BrokerEntryMetadata(broker_timestamp=123, index=9)
    raw_entry_metadata = entry_metadata.SerializeToString()
    span = pack_payload(METADATA, b"payload")
    extra = (
        struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(raw_entry_metadata))
        + raw_entry_metadata
        + struct.pack(">HI", 0x0E01, crc32c.crc32c(span))
        + span
    )
    frame = decode_frame(frame_bytes(SEND, extra))
    assert frame.payload is not None
    assert frame.payload.broker_entry_metadata == entry_metadata
    assert frame.payload.data == b"payload"
    assert frame.payload.raw == span


# --- incremental decoding -------------------------------------------------------------------


def encoded_frames() -> st.SearchStrategy[list[bytes]]:
    with_payload = st.builds(encode_payload_command, payload_commands, metadatas, payload_bytes)
    return st.lists(st.builds(encode_command, simple_commands) | with_payload, max_size=8)


def drain(decoder: FrameDecoder) -> list[Frame]:
    return list(decoder)


@given(encoded_frames(), st.data())
def test_decoder_in_random_chunks(frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    decoded: list[Frame] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        decoder.feed(stream[start:end])
        decoded += drain(decoder)
    assert [f.command for f in decoded] == [decode_frame(b).command for b in frames]
    assert decoder.buffered == 0


@given(encoded_frames())
def test_decoder_byte_by_byte(frames: list[bytes]) -> None:
    decoder = FrameDecoder()
    decoded: list[Frame] = []
    for byte in b"".join(frames):
        decoder.feed(bytes([byte]))
        decoded += drain(decoder)
    assert [f.command for f in decoded] == [decode_frame(b).command for b in frames]


def test_decoder_waits_for_the_rest_of_a_frame() -> None:
    encoded = send_frame()
    decoder = FrameDecoder()
    decoder.feed(encoded[:-1])
    assert decoder.next_frame() is None
    decoder.feed(encoded[-1:])
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.type == T.SEND


def test_frames_outlive_the_decoder_buffer() -> None:
    decoder = FrameDecoder()
    decoder.feed(send_frame(b"first") + send_frame(b"second"))
    first = decoder.next_frame()
    decoder.feed(send_frame(b"third"))
    rest = drain(decoder)
    assert first is not None and first.payload is not None
    assert first.payload.data == b"first"
    assert [bytes(f.payload.data) for f in rest if f.payload] == [b"second", b"third"]


# --- bad input ------------------------------------------------------------------------------


def test_bad_checksum_carries_the_command_and_the_stream_goes_on() -> None:
    corrupt = bytearray(send_frame(b"payload"))
    corrupt[-1] ^= 0x01
    decoder = FrameDecoder()
    decoder.feed(bytes(corrupt) + encode_command(pb.BaseCommand(type=T.PING, ping={})))
    with pytest.raises(ChecksumError) as caught:
        decoder.next_frame()
    assert caught.value.command.send.producer_id == 7
    assert caught.value.command.send.sequence_id == 42
    assert caught.value.code == "pulsar.checksum"
    frame = decoder.next_frame()
    assert frame is not None and frame.type == T.PING


@given(st.data())
def test_truncated_frames_are_refused(data: st.DataObject) -> None:
    encoded = send_frame()
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedFrameError):
        decode_frame(encoded[:cut])  # its size field disagrees
    inner = encoded[4:cut]
    with pytest.raises(ProtocolError):
        decode_frame(struct.pack(">I", len(inner)) + inner)  # consistent size, parts missing


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(frame_bytes(SEND, b""), id="send-without-payload"),
        pytest.param(frame_bytes(SEND, b"\x0e\x01\x00"), id="checksum-cut-short"),
        pytest.param(frame_bytes(SEND, b"\x00\x00\x00\xff"), id="metadata-overruns"),
        pytest.param(frame_bytes(SEND, b"\x00\x00\x00\x01\xff"), id="metadata-garbage"),
        pytest.param(frame_bytes(SEND, b"\x0e\x02\x00\x00\x00\x09"), id="entry-metadata-overruns"),
        pytest.param(
            frame_bytes(pb.BaseCommand(type=T.PING, ping={}), b"junk"), id="trailing-bytes"
        ),
        pytest.param(frame_bytes(pb.BaseCommand(type=T.SEND), b""), id="command-without-body"),
        pytest.param(struct.pack(">II", 6, 2) + b"\xff\xff", id="command-garbage"),
        pytest.param(struct.pack(">II", 6, 2) + b"\x08\x63", id="unknown-command-type"),
        pytest.param(struct.pack(">II", 4, 9), id="command-overruns"),
    ],
)
def test_malformed_frames(frame: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        decode_frame(frame)
    decoder = FrameDecoder()
    decoder.feed(frame + encode_command(pb.BaseCommand(type=T.PONG, pong={})))
    with pytest.raises(MalformedFrameError):
        decoder.next_frame()
    following = decoder.next_frame()
    assert following is not None and following.type == T.PONG


def test_missing_required_field_is_malformed() -> None:
    partial = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=1))
    body = partial.SerializePartialToString()
    with pytest.raises(MalformedFrameError, match="required"):
        decode_frame(struct.pack(">II", 4 + len(body), len(body)) + body)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_a_protocol_error(garbage: bytes) -> None:
    framed = struct.pack(">I", len(garbage)) + garbage
    try:
        frame = decode_frame(framed)
    except ProtocolError:
        return
    assert frame.command.IsInitialized()


def test_oversized_frame_is_refused_before_it_is_buffered() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLargeError) as caught:
        decoder.feed(struct.pack(">I", 1001))
    assert (caught.value.size, caught.value.max_size) == (1001, 1000)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"more")
    assert decoder.buffered == 4


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    encoded = send_frame(b"x" * 100)
    decoder = FrameDecoder(max_frame_size=len(encoded) - 4)
    decoder.feed(encoded)
    assert decoder.next_frame() is not None


def test_frame_too_small_for_a_command_breaks_the_stream() -> None:
    decoder = FrameDecoder()
    with pytest.raises(MalformedFrameError):
        decoder.feed(struct.pack(">I", 3) + b"abc")
    with pytest.raises(MalformedFrameError):
        decoder.next_frame()


def test_error_codes_are_stable_and_registered() -> None:
    assert ProtocolError.for_code("pulsar.frame_too_large") is FrameTooLargeError
    assert ProtocolError.for_code("pulsar.malformed_frame") is MalformedFrameError
    assert ProtocolError.for_code("pulsar.checksum") is ChecksumError
