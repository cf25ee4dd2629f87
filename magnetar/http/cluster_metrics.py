"""Series of a broker writing to storage nodes: the nodes it sees (free space, mode) and what
its replicated ledgers went through (ensemble changes, recoveries, re-replication)."""

from __future__ import annotations

from prometheus_client.core import Metric

from magnetar.cluster.node import READ_ONLY
from magnetar.cluster.replicated import ReplicatedStorage
from magnetar.http.metrics import MetricSource, counter, gauge


def cluster_metrics(storage: ReplicatedStorage, cluster: str) -> MetricSource:
    async def collect() -> list[Metric]:
        nodes = list(storage.nodes.nodes.values())
        free = gauge(
            "magnetar_storage_node_free_bytes", "Free disk of a storage node", ["cluster", "node"]
        )
        read_only = gauge(
            "magnetar_storage_node_read_only",
            "1 while a storage node refuses adds",
            ["cluster", "node"],
        )
        for n in nodes:
            free.add_metric([cluster, n.node_id], float(n.free_bytes))
            read_only.add_metric([cluster, n.node_id], float(n.mode == READ_ONLY))
        out: list[Metric] = [free, read_only]
        registered = gauge("magnetar_storage_nodes", "Storage nodes registered", ["cluster"])
        registered.add_metric([cluster], float(len(nodes)))
        under = gauge(
            "magnetar_under_replicated_ledgers",
            "Closed ledgers naming a storage node gone past the grace period",
            ["cluster"],
        )
        under.add_metric([cluster], float(len(storage.under_replicated)))
        damaged = gauge(
            "magnetar_damaged_replicas",
            "Replicas of ledgers found damaged or incomplete, not yet repaired",
            ["cluster"],
        )
        damaged.add_metric([cluster], float(sum(map(len, storage.repairs.found.values()))))
        out += [registered, under, damaged]
        for name, text, key in (
            (
                "magnetar_ledger_ensemble_changes",
                "Storage nodes replaced in an open ledger",
                "ensemble_changes",
            ),
            (
                "magnetar_ledger_recoveries",
                "Ledgers of a previous writer fenced and closed",
                "recoveries",
            ),
            (
                "magnetar_rereplicated_fragments",
                "Ledger fragments copied off a lost node",
                "rereplicated_fragments",
            ),
            (
                "magnetar_rereplicated_entries",
                "Entries copied off a lost node",
                "rereplicated_entries",
            ),
            (
                "magnetar_damaged_replica_reads",
                "Reads that met a damaged replica and were served by another",
                "damaged_replica_reads",
            ),
            ("magnetar_repaired_replicas", "Damaged replicas replaced", "repaired_replicas"),
            (
                "magnetar_repaired_entries",
                "Entries written back to a storage node whose copy was damaged",
                "repaired_entries",
            ),
        ):
            total = counter(name, text, ["cluster"])
            total.add_metric([cluster], float(storage.stats[key]))
            out.append(total)
        return out

    return collect
