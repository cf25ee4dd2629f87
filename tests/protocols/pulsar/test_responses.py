"""The broker's frames decode to what the clients expect, and message ids convert both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.ids import EARLIEST, LATEST, MessageId
from magnetar.protocols.pulsar import responses
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import decode_frame, pack_payload
from magnetar.protocols.pulsar.message_ids import from_wire, to_wire

T = pb.BaseCommand.Type
i64 = st.integers(-(2**63), 2**63 - 1)


def command_of(frame: bytes) -> pb.BaseCommand:
    return decode_frame(frame).command


@given(i64, i64, st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1))
def test_message_id_round_trip(ledger: int, entry: int, batch: int, partition: int) -> None:
    message_id = MessageId(ledger, entry, batch, partition)
    assert from_wire(to_wire(message_id)) == message_id


def test_earliest_and_latest_travel_as_unsigned() -> None:
    assert to_wire(EARLIEST).ledger_id == 2**64 - 1
    assert from_wire(pb.MessageIdData(ledger_id=2**64 - 1, entry_id=2**64 - 1)) == EARLIEST
    assert from_wire(to_wire(LATEST)) == LATEST
    assert not to_wire(MessageId(1, 2)).HasField("batch_index")


def test_connected() -> None:
    body = command_of(responses.connected("Magnetar-1", max_message_size=1024000)).connected
    assert (body.server_version, body.protocol_version, body.max_message_size) == (
        "Magnetar-1",
        20,
        1024000,
    )
    assert not command_of(responses.connected("M")).connected.HasField("max_message_size")


def test_producer_success_with_schema_version() -> None:
    frame = responses.producer_success(3, "prod", schema_version=responses.schema_version_bytes(2))
    body = command_of(frame).producer_success
    assert (body.request_id, body.producer_name, body.last_sequence_id) == (3, "prod", -1)
    assert body.schema_version == b"\x00" * 7 + b"\x02"


def test_send_receipt_and_send_error() -> None:
    receipt = command_of(responses.send_receipt(1, 2, MessageId(3, 4))).send_receipt
    assert (receipt.producer_id, receipt.sequence_id) == (1, 2)
    assert (receipt.message_id.ledger_id, receipt.message_id.entry_id) == (3, 4)
    failure = command_of(responses.send_error(1, 2, pb.ServerError.ChecksumError, "bad")).send_error
    assert (failure.error, failure.message) == (pb.ServerError.ChecksumError, "bad")


def test_lookup_and_partitioned_metadata() -> None:
    lookup = command_of(responses.lookup_response(5, "pulsar://h:6650")).lookup_topic_response
    assert lookup.response == pb.CommandLookupTopicResponse.Connect
    assert (lookup.request_id, lookup.broker_service_url, lookup.authoritative) == (
        5,
        "pulsar://h:6650",
        True,
    )
    failed = command_of(responses.lookup_error(5, pb.ServerError.TopicNotFound, "no"))
    assert failed.lookup_topic_response.response == pb.CommandLookupTopicResponse.Failed
    meta = command_of(responses.partitioned_metadata_response(6, 0)).partition_metadata_response
    assert (meta.request_id, meta.partitions, meta.HasField("partitions")) == (6, 0, True)


def test_message_carries_the_stored_bytes() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    raw = pack_payload(metadata, b"body")
    frame = decode_frame(responses.message(9, MessageId(1, 2), raw, redelivery_count=3))
    assert frame.command.message.consumer_id == 9
    assert frame.command.message.redelivery_count == 3
    assert frame.payload is not None
    assert frame.payload.raw == raw
    assert frame.payload.metadata == metadata


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (responses.ping(), T.PING),
        (responses.pong(), T.PONG),
        (responses.success(1), T.SUCCESS),
        (responses.error(1, pb.ServerError.UnknownError, "x"), T.ERROR),
        (
            responses.partitioned_metadata_error(1, pb.ServerError.MetadataError, "x"),
            T.PARTITIONED_METADATA_RESPONSE,
        ),
        (
            responses.get_topics_of_namespace_response(1, ["a", "b"]),
            T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        ),
        (responses.close_producer(1, 2), T.CLOSE_PRODUCER),
        (responses.close_consumer(1, 2), T.CLOSE_CONSUMER),
        (responses.active_consumer_change(1, is_active=True), T.ACTIVE_CONSUMER_CHANGE),
        (responses.ack_response(1, 2), T.ACK_RESPONSE),
        (
            responses.get_last_message_id_response(1, MessageId(2, 3, 4)),
            T.GET_LAST_MESSAGE_ID_RESPONSE,
        ),
        (
            responses.get_schema_response(
                1, pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.JSON), b"\x00" * 8
            ),
            T.GET_SCHEMA_RESPONSE,
        ),
        (responses.get_schema_error(1, pb.ServerError.TopicNotFound, "x"), T.GET_SCHEMA_RESPONSE),
        (responses.get_or_create_schema_response(1, b"\x00" * 8), T.GET_OR_CREATE_SCHEMA_RESPONSE),
        (
            responses.get_or_create_schema_error(1, pb.ServerError.IncompatibleSchema, "x"),
            T.GET_OR_CREATE_SCHEMA_RESPONSE,
        ),
    ],
)
def test_every_helper_builds_a_valid_frame(frame: bytes, kind: int) -> None:
    assert command_of(frame).type == kind
