"""Errors of the metadata store."""

from magnetar.core.errors import MagnetarError


class MetadataError(MagnetarError):
    """The metadata store failed or refused an operation."""

    code = "meta.error"
    pulsar_error = "MetadataError"


class NotFoundError(MetadataError):
    """No node at that path (a get, delete or versioned put on a missing node)."""

    code = "meta.not_found"
    http_status = 404


class NodeExistsError(MetadataError):
    """A create (expected version -1) found the node already there."""

    code = "meta.exists"
    http_status = 409


class BadVersionError(MetadataError):
    """The node's version is not the expected one: someone else wrote first. Re-read and retry."""

    code = "meta.bad_version"
    http_status = 409
    kafka_error = "REQUEST_TIMED_OUT"  # a concurrent update: retry
    retriable = True
