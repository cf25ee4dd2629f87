"""Errors of replicated storage. They are storage errors: protocols answer them as they
answer a failed local write (nothing of the failed append was acknowledged)."""

from __future__ import annotations

from magnetar.storage.errors import CorruptionError, FencedError, StorageError


class NotEnoughStorageNodesError(StorageError):
    """Fewer storage nodes answered than the ack quorum needs: nothing was acknowledged.
    Start or repair storage nodes (`magnetar admin storage-nodes list`) and retry."""

    code = "cluster.not_enough_nodes"
    kafka_error = "NOT_ENOUGH_REPLICAS"
    retriable = True


class LedgerFencedError(FencedError):
    """Another writer fenced this ledger (it recovered the topic after this broker was
    thought dead): this broker must not acknowledge anything more for it."""

    code = "cluster.fenced"


class ReplicasDamagedError(CorruptionError):
    """Every replica of an entry answered that its copy is damaged: no good copy is left.
    A damaged-data error like a local segment's (Kafka CORRUPT_MESSAGE; Pulsar
    subscriptions wait or skip, see auto_skip_non_recoverable_data)."""

    def __init__(self, message: str) -> None:
        StorageError.__init__(self, message)
        self.path, self.position = "", 0


class NodeUnavailableError(StorageError):
    """A storage node did not answer: refused connection, lost connection or timeout."""

    code = "cluster.node_unavailable"
    retriable = True
