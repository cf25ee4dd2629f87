"""Errors of replicated storage. They are storage errors: protocols answer them as they
answer a failed local write (nothing of the failed append was acknowledged)."""

from __future__ import annotations

from magnetar.storage.errors import StorageError


class NotEnoughStorageNodesError(StorageError):
    """Fewer storage nodes answered than the ack quorum needs: nothing was acknowledged.
    Start or repair storage nodes (`magnetar admin storage-nodes list`) and retry."""

    code = "cluster.not_enough_nodes"
    retriable = True


class LedgerFencedError(StorageError):
    """Another writer fenced this ledger (it recovered the topic after this broker was
    thought dead): this broker must not acknowledge anything more for it."""

    code = "cluster.fenced"


class NodeUnavailableError(StorageError):
    """A storage node did not answer: refused connection, lost connection or timeout."""

    code = "cluster.node_unavailable"
    retriable = True
