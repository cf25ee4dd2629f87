"""The Pulsar binary protocol (tier 5).

Pure codec modules, no I/O: ``frames`` (framing, CRC32C, incremental decoding),
``responses`` (the frames a broker sends), ``batch`` (batch payloads), ``compression``
(payload codecs), ``message_ids`` (MessageId ↔ MessageIdData) and ``errors``. The protocol
definitions are ``pulsar_api.proto``; its generated module is ``_proto.pulsar_api_pb2``.
"""
