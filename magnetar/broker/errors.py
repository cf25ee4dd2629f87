"""Errors of the broker. Protocol handlers map each ``code`` to their wire error."""

from __future__ import annotations

from magnetar.core.errors import MagnetarError
from magnetar.ledger import StorageError  # re-exported: the servers map storage failures

__all__ = ["StorageError"]  # and every class below


class BrokerError(MagnetarError):
    """The broker refused or failed an operation."""

    code = "broker.error"


class NotFoundError(BrokerError):
    code = "broker.not_found"


class TenantNotFoundError(NotFoundError):
    code = "broker.tenant_not_found"


class NamespaceNotFoundError(NotFoundError):
    code = "broker.namespace_not_found"


class TopicNotFoundError(NotFoundError):
    code = "broker.topic_not_found"


class SubscriptionNotFoundError(NotFoundError):
    code = "broker.subscription_not_found"


class AlreadyExistsError(BrokerError):
    code = "broker.exists"


class NotEmptyError(BrokerError):
    """Deleting something that still holds other things (namespaces, topics)."""

    code = "broker.not_empty"


class InvalidRequestError(BrokerError):
    """The request is malformed or impossible; the message says which part."""

    code = "broker.invalid"


class ProducerBusyError(BrokerError):
    """Another producer holds exclusive access, or the producer name is taken."""

    code = "broker.producer_busy"


class ProducerFencedError(BrokerError):
    code = "broker.producer_fenced"


class ConsumerBusyError(BrokerError):
    """An exclusive subscription already has a consumer, or the types conflict."""

    code = "broker.consumer_busy"


class IncompatibleSchemaError(BrokerError):
    code = "broker.incompatible_schema"


class SchemaNotFoundError(NotFoundError):
    code = "broker.schema_not_found"


class MessageTooLargeError(BrokerError):
    code = "broker.message_too_large"


class TopicFencedError(BrokerError):
    """The topic is being handed to another broker (unloaded): this broker stores nothing
    more of it. Nothing of the refused request was stored; look the topic up again and
    retry there (Pulsar's clients do so on their own)."""

    code = "broker.topic_fenced"
    retriable = True


class CursorFencedError(BrokerError):
    """Another owner (a newer broker of the topic) wrote this cursor: this one no longer
    owns the subscription and writes nothing more to it."""

    code = "broker.cursor_fenced"


class PartitionCountError(InvalidRequestError):
    """A partitioned topic asked for fewer than 1 partition or more than the broker's
    ``max_num_partitions_per_partitioned_topic``; nothing was created or changed."""

    code = "broker.partition_count"


class TooManyTopicsError(InvalidRequestError):
    """The namespace already holds ``max_topics_per_namespace`` topics (each partition
    counts as one); nothing was created. Delete topics or raise the setting. A request the
    broker does not allow now, as Pulsar's NotAllowedException."""

    code = "broker.too_many_topics"
