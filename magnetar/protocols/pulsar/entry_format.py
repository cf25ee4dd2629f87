"""How the broker reads facts out of entries written by Pulsar producers (format PULSAR).

A stored entry is ``[u32 metadata size][MessageMetadata][payload]`` exactly as the producer
sent it; only the metadata is parsed here, never the (possibly compressed) payload.
"""

from __future__ import annotations

import struct

from magnetar.broker import formats
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb

_U32 = struct.Struct(">I")


def metadata_of(raw: bytes) -> pb.MessageMetadata:
    (size,) = _U32.unpack_from(raw, 0)
    metadata = pb.MessageMetadata()
    metadata.ParseFromString(raw[4 : 4 + size])
    return metadata


def message_count(metadata: pb.MessageMetadata) -> int:
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


class PulsarEntryFormat:
    def key(self, payload: bytes) -> bytes | None:
        metadata = metadata_of(payload)
        if metadata.HasField("ordering_key"):
            return bytes(metadata.ordering_key)
        if metadata.HasField("partition_key"):
            return metadata.partition_key.encode()
        return None

    def sequence(self, payload: bytes) -> formats.Sequence | None:
        metadata = metadata_of(payload)
        last = metadata.sequence_id + message_count(metadata) - 1
        highest = max(metadata.highest_sequence_id, last)
        return formats.Sequence(metadata.producer_name, metadata.sequence_id, highest)


formats.register(formats.PULSAR, PulsarEntryFormat())
