"""Errors of the managed ledger."""

from magnetar.core.errors import MagnetarError


class LedgerError(MagnetarError):
    """The managed ledger refused or failed an operation."""

    code = "ledger.error"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


class NoObjectStoreError(LedgerError):
    """The ledger was opened without a tier: configure ``tier_url`` to offload."""

    code = "ledger.no_object_store"
    http_status = 400
    pulsar_error = "NotAllowedError"
    kafka_error = "INVALID_REQUEST"


class SegmentNotOffloadableError(LedgerError):
    """Only a CLOSED segment that is still local can be offloaded: the open one is still
    written to, and an OFFLOADING or OFFLOADED one already has (or is getting) its copy."""

    code = "ledger.not_offloadable"
    http_status = 409
    pulsar_error = "NotAllowedError"
    kafka_error = "INVALID_REQUEST"
