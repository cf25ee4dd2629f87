"""The Kafka protocol (Kafka-on-Pulsar, tier 6): unchanged Kafka clients on Magnetar topics.

Pure codec modules, no I/O: ``records`` (magic-2 record batches), ``legacy`` (v0/v1 message
sets), ``compression``, ``wire`` (request/response framing), ``conversion`` (KAFKA ↔ PULSAR
entries) and ``errors``. The asyncio server is ``server``; its request handlers live in
``admin``, ``produce``, ``fetch`` and ``groups``, the group membership state machine in
``coordinator`` and idempotent-producer dedup in ``idempotence``. ``entry_format`` reads
KAFKA entries for the layers below (``magnetar.core.formats`` names it).
"""

__all__: list[str] = []
