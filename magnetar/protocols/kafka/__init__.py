"""The Kafka protocol handler (Kafka-on-Pulsar). Not built yet."""
