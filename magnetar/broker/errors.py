"""Errors of the broker, each with its wire codes (see magnetar.core.errors)."""

from __future__ import annotations

from magnetar.core.errors import MagnetarError


class BrokerError(MagnetarError):
    """The broker refused or failed an operation."""

    code = "broker.error"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


class NotFoundError(BrokerError):
    code = "broker.not_found"
    http_status = 404
    pulsar_error = "TopicNotFound"
    kafka_error = "UNKNOWN_TOPIC_OR_PARTITION"


class TenantNotFoundError(NotFoundError):
    code = "broker.tenant_not_found"


class NamespaceNotFoundError(NotFoundError):
    code = "broker.namespace_not_found"


class TopicNotFoundError(NotFoundError):
    code = "broker.topic_not_found"


class SubscriptionNotFoundError(NotFoundError):
    code = "broker.subscription_not_found"
    pulsar_error = "SubscriptionNotFound"
    kafka_error = "GROUP_ID_NOT_FOUND"


class AlreadyExistsError(BrokerError):
    code = "broker.exists"
    http_status = 409
    pulsar_error = "NotAllowedError"
    kafka_error = "TOPIC_ALREADY_EXISTS"


class NotEmptyError(BrokerError):
    """Deleting something that still holds other things (namespaces, topics)."""

    code = "broker.not_empty"
    http_status = 409
    pulsar_error = "NotAllowedError"
    kafka_error = "INVALID_REQUEST"


class InvalidRequestError(BrokerError):
    """The request is malformed or impossible; the message says which part."""

    code = "broker.invalid"
    http_status = 400
    pulsar_error = "NotAllowedError"
    kafka_error = "INVALID_REQUEST"


class ProducerBusyError(BrokerError):
    """Another producer holds exclusive access, or the producer name is taken."""

    code = "broker.producer_busy"
    http_status = 409
    pulsar_error = "ProducerBusy"


class ProducerFencedError(BrokerError):
    code = "broker.producer_fenced"
    http_status = 409
    pulsar_error = "ProducerFenced"
    kafka_error = "PRODUCER_FENCED"


class ConsumerBusyError(BrokerError):
    """An exclusive subscription already has a consumer, or the types conflict."""

    code = "broker.consumer_busy"
    http_status = 409
    pulsar_error = "ConsumerBusy"


class IncompatibleSchemaError(BrokerError):
    code = "broker.incompatible_schema"
    http_status = 409
    pulsar_error = "IncompatibleSchema"
    kafka_error = "INVALID_RECORD"


class SchemaNotFoundError(NotFoundError):
    code = "broker.schema_not_found"
    kafka_error = "UNKNOWN_SERVER_ERROR"  # no Kafka request names a schema


class MessageTooLargeError(BrokerError):
    code = "broker.message_too_large"
    http_status = 413
    # the one SEND_ERROR on which the C++ client fails that message alone (not retried)
    pulsar_error = "ChecksumError"
    kafka_error = "MESSAGE_TOO_LARGE"


class TopicFencedError(BrokerError):
    """The topic is being handed to another broker (unloaded): this broker stores nothing
    more of it. Nothing of the refused request was stored; look the topic up again and
    retry there (Pulsar's clients do so on their own)."""

    code = "broker.topic_fenced"
    http_status = 503
    pulsar_error = "ServiceNotReady"  # the client looks the topic up again
    kafka_error = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class CursorFencedError(BrokerError):
    """Another owner (a newer broker of the topic) wrote this cursor: this one no longer
    owns the subscription and writes nothing more to it."""

    code = "broker.cursor_fenced"
    retriable = True  # through the topic's new owner
    http_status = 503
    pulsar_error = "ServiceNotReady"  # the subscription moved: look it up again
    kafka_error = "NOT_COORDINATOR"


class PartitionCountError(InvalidRequestError):
    """A partitioned topic asked for fewer than 1 partition or more than the broker's
    ``max_num_partitions_per_partitioned_topic``; nothing was created or changed."""

    code = "broker.partition_count"
    http_status = 406  # Pulsar: "Number of partitions should be ..."
    kafka_error = "INVALID_PARTITIONS"


class TooManyTopicsError(InvalidRequestError):
    """The namespace already holds ``max_topics_per_namespace`` topics (each partition
    counts as one); nothing was created. Delete topics or raise the setting. A request the
    broker does not allow now, as Pulsar's NotAllowedException."""

    code = "broker.too_many_topics"
    http_status = 412  # Pulsar: "Exceed maximum number of topics in namespace"
    kafka_error = "POLICY_VIOLATION"
