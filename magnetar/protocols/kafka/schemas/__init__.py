"""Kafka message definitions that the pinned ``kafka-python`` does not ship (KIP-848's
ConsumerGroupHeartbeat and ConsumerGroupDescribe), in Kafka's JSON message format, loaded by
``kafka.protocol``'s own schema reader (see ``magnetar.protocols.kafka.wire``)."""
