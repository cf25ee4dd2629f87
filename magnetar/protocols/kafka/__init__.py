"""The Kafka protocol (Kafka-on-Pulsar, tier 6): unchanged Kafka clients on Magnetar topics.

Pure codec modules, no I/O: ``records`` (magic-2 record batches), ``legacy`` (v0/v1 message
sets), ``compression``, ``wire`` (request/response framing), ``conversion`` (KAFKA ↔ PULSAR
entries) and ``errors``. The asyncio server is ``server``; its request handlers live in
``admin``, ``produce``, ``fetch`` and ``groups``, the group membership state machine in
``coordinator`` and idempotent-producer dedup in ``idempotence``. Importing the package
registers the KAFKA entry format with the broker.
"""

from magnetar.protocols.kafka import entry_format as _entry_format

__all__: list[str] = []
_ = _entry_format
