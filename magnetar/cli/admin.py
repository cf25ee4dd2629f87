"""``magnetar admin tenants|namespaces|topics|subscriptions ...``: pulsar-admin habits.

Each command maps to one REST call (or a few). Results print as readable text, or as JSON
with ``--json``; a refused call prints the server's reason and exits with code 1.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from typing import Any

from magnetar.cli.progress import watch_offload
from magnetar.cli.rest import AdminCallError, RestClient, namespace_path, topic_path

Action = Callable[[argparse.Namespace, RestClient], Any]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def seconds(text: str) -> int:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d``; ``-1`` = unlimited."""
    m = re.fullmatch(r"(-?\d+)([smhdw]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 10m, 2h, 1d, -1)")
    return int(m.group(1)) * _UNITS.get(m.group(2) or "s", 1)


def size_bytes(text: str) -> int:
    """``100``, ``10K``, ``5M``, ``1G``; ``-1`` = unlimited."""
    m = re.fullmatch(r"(-?\d+)([kmgt]?)b?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100M, 1G, -1)")
    return int(m.group(1)) * _SIZES.get(m.group(2), 1)


def _position(text: str) -> dict[str, int] | None:
    if text == "latest":
        return None
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    ledger, _, entry = text.partition(":")
    if not (ledger.lstrip("-").isdigit() and entry.lstrip("-").isdigit()):
        raise AdminCallError(f"message id must be earliest, latest or LEDGER:ENTRY, got {text!r}")
    return {"ledgerId": int(ledger), "entryId": int(entry)}


def _timestamp(text: str) -> int:
    """Epoch milliseconds, or a relative time back from now (``10m``)."""
    if text.isdigit() and len(text) > 9:
        return int(text)
    return int(time.time() * 1000) - seconds(text) * 1000


# -- tenants --------------------------------------------------------------------------------

TENANTS: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    ("list", "list tenants", [], lambda a, r: r.call("GET", "/admin/v2/tenants")),
    (
        "get",
        "show a tenant",
        [(["tenant"], {})],
        lambda a, r: r.call("GET", f"/admin/v2/tenants/{a.tenant}"),
    ),
    (
        "create",
        "create a tenant",
        [
            (["tenant"], {}),
            (["--admin-roles", "-r"], {"default": "", "help": "comma-separated roles"}),
            (["--allowed-clusters", "-c"], {"default": "standalone", "help": "comma-separated"}),
        ],
        lambda a, r: r.call("PUT", f"/admin/v2/tenants/{a.tenant}", _tenant_body(a)),
    ),
    (
        "update",
        "update a tenant",
        [
            (["tenant"], {}),
            (["--admin-roles", "-r"], {"default": ""}),
            (["--allowed-clusters", "-c"], {"default": "standalone"}),
        ],
        lambda a, r: r.call("POST", f"/admin/v2/tenants/{a.tenant}", _tenant_body(a)),
    ),
    (
        "delete",
        "delete an empty tenant",
        [(["tenant"], {})],
        lambda a, r: r.call("DELETE", f"/admin/v2/tenants/{a.tenant}"),
    ),
]


def _tenant_body(a: argparse.Namespace) -> dict[str, list[str]]:
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    return {"adminRoles": split(a.admin_roles), "allowedClusters": split(a.allowed_clusters)}


# -- namespaces -----------------------------------------------------------------------------

_NS: list[tuple[list[str], dict[str, Any]]] = [(["namespace"], {"help": "TENANT/NAMESPACE"})]


def _ns(a: argparse.Namespace, suffix: str = "") -> str:
    return namespace_path(a.namespace) + suffix


NAMESPACES: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    (
        "list",
        "list the namespaces of a tenant",
        [(["tenant"], {})],
        lambda a, r: r.call("GET", f"/admin/v2/namespaces/{a.tenant}"),
    ),
    ("create", "create a namespace", _NS, lambda a, r: r.call("PUT", _ns(a))),
    ("delete", "delete an empty namespace", _NS, lambda a, r: r.call("DELETE", _ns(a))),
    ("policies", "show all policies", _NS, lambda a, r: r.call("GET", _ns(a))),
    ("topics", "list topics", _NS, lambda a, r: r.call("GET", _ns(a, "/topics"))),
    (
        "bundles",
        "the namespace's bundles and which broker owns each",
        _NS,
        lambda a, r: r.call("GET", _ns(a, "/bundles")),
    ),
    (
        "unload",
        "hand the namespace's bundles (or one: --bundle RANGE) to the next lookup",
        [*_NS, (["--bundle", "-b"], {"help": "e.g. 0x00000000_0x40000000"})],
        lambda a, r: r.call("PUT", _ns(a, f"/{a.bundle}/unload" if a.bundle else "/unload")),
    ),
    (
        "split-bundle",
        "split a bundle in two equal halves, both kept by its owner (pulsar-admin's habit)",
        [*_NS, (["--bundle", "-b"], {"required": True, "help": "e.g. 0x00000000_0x40000000"})],
        lambda a, r: r.call("PUT", _ns(a, f"/{a.bundle}/split")),
    ),
    (
        "set-retention",
        "keep acknowledged messages for a time and/or size (-1: unlimited)",
        [
            *_NS,
            (["--time", "-t"], {"type": seconds, "required": True, "help": "e.g. 10m, 2h, -1"}),
            (["--size", "-s"], {"type": size_bytes, "required": True, "help": "e.g. 100M, -1"}),
        ],
        lambda a, r: r.call(
            "POST",
            _ns(a, "/retention"),
            {
                "retentionTimeInMinutes": a.time // 60 if a.time >= 0 else -1,
                "retentionSizeInMB": a.size // (1 << 20) if a.size >= 0 else -1,
            },
        ),
    ),
    ("get-retention", "show retention", _NS, lambda a, r: r.call("GET", _ns(a, "/retention"))),
    ("remove-retention", "", _NS, lambda a, r: r.call("DELETE", _ns(a, "/retention"))),
    (
        "set-message-ttl",
        "expire unacknowledged messages after a time",
        [
            *_NS,
            (["--messageTTL", "--ttl", "-ttl"], {"dest": "ttl", "type": seconds, "required": True}),
        ],
        lambda a, r: r.call("POST", _ns(a, "/messageTTL"), a.ttl),
    ),
    ("get-message-ttl", "", _NS, lambda a, r: r.call("GET", _ns(a, "/messageTTL"))),
    ("remove-message-ttl", "", _NS, lambda a, r: r.call("DELETE", _ns(a, "/messageTTL"))),
    (
        "set-deduplication",
        "turn broker deduplication on or off for the namespace",
        [
            *_NS,
            (["--enable", "-e"], {"action": "store_true"}),
            (["--disable", "-d"], {"action": "store_true"}),
        ],
        lambda a, r: r.call("POST", _ns(a, "/deduplication"), _enable(a)),
    ),
    ("get-deduplication", "", _NS, lambda a, r: r.call("GET", _ns(a, "/deduplication"))),
    (
        "set-schema-compatibility-strategy",
        "BACKWARD, FORWARD, FULL, *_TRANSITIVE, ALWAYS_COMPATIBLE, ALWAYS_INCOMPATIBLE",
        [*_NS, (["--compatibility", "-c"], {"required": True})],
        lambda a, r: r.call("PUT", _ns(a, "/schemaCompatibilityStrategy"), a.compatibility.upper()),
    ),
    (
        "get-schema-compatibility-strategy",
        "",
        _NS,
        lambda a, r: r.call("GET", _ns(a, "/schemaCompatibilityStrategy")),
    ),
    (
        "set-offload-threshold",
        "offload when a topic's local data exceeds this size (-1: off, 0: at once)",
        [*_NS, (["--size", "-s"], {"type": size_bytes, "required": True})],
        lambda a, r: r.call("PUT", _ns(a, "/offloadThreshold"), a.size),
    ),
    ("get-offload-threshold", "", _NS, lambda a, r: r.call("GET", _ns(a, "/offloadThreshold"))),
    (
        "set-offload-deletion-lag",
        "delete local copies this long after offload",
        [*_NS, (["--lag", "-l"], {"type": seconds, "required": True})],
        lambda a, r: r.call("PUT", _ns(a, "/offloadDeletionLagMs"), a.lag * 1000),
    ),
    (
        "get-offload-deletion-lag",
        "",
        _NS,
        lambda a, r: r.call("GET", _ns(a, "/offloadDeletionLagMs")),
    ),
    (
        "set-iceberg-maintenance",
        "turn maintenance of the namespace's Iceberg tables on or off",
        [*_NS, (["--enabled"], {"choices": ["true", "false"], "required": True})],
        lambda a, r: r.call("POST", _ns(a, "/icebergMaintenance"), a.enabled == "true"),
    ),
    (
        "get-iceberg-maintenance",
        "",
        _NS,
        lambda a, r: r.call("GET", _ns(a, "/icebergMaintenance")),
    ),
    (
        "set-backlog-quota",
        "limit the backlog size",
        [
            *_NS,
            (["--limit", "-l"], {"type": size_bytes, "required": True}),
            (["--policy", "-p"], {"default": "producer_request_hold"}),
        ],
        lambda a, r: r.call(
            "POST", _ns(a, "/backlogQuota"), {"limitSize": a.limit, "policy": a.policy}
        ),
    ),
    ("get-backlog-quotas", "", _NS, lambda a, r: r.call("GET", _ns(a, "/backlogQuotaMap"))),
]


def _enable(a: argparse.Namespace) -> bool:
    if a.enable == a.disable:
        raise AdminCallError("give exactly one of --enable or --disable")
    return bool(a.enable)


# -- topics and subscriptions ---------------------------------------------------------------

Arg = tuple[list[str], dict[str, Any]]
_TOPIC: list[Arg] = [(["topic"], {"help": "persistent://TENANT/NS/TOPIC or a short name"})]
_SUB: list[Arg] = [*_TOPIC, (["--subscription", "-s"], {"required": True})]
_FORCE: Arg = (["--force", "-f"], {"action": "store_true"})


def _t(a: argparse.Namespace, suffix: str = "") -> str:
    return topic_path(a.topic) + suffix


def _s(a: argparse.Namespace, suffix: str = "") -> str:
    return topic_path(a.topic) + f"/subscription/{a.subscription}" + suffix


def _q(a: argparse.Namespace) -> str:
    return "?force=true" if getattr(a, "force", False) else ""


def _stats(a: argparse.Namespace, r: RestClient, plain: str, partitioned: str) -> Any:
    """A topic's stats; a partitioned topic's through Pulsar's ``partitioned-*`` call (its
    plain ``stats`` answers 404, as in Pulsar)."""
    if r.call("GET", _t(a, "/partitions"))["partitions"] > 0:
        return r.call("GET", _t(a, f"/{partitioned}"))
    return r.call("GET", _t(a, f"/{plain}"))


def _partitioned_stats(a: argparse.Namespace, r: RestClient) -> Any:
    each = "true" if a.per_partition else "false"
    return r.call("GET", _t(a, f"/partitioned-stats?perPartition={each}"))


def _check(a: argparse.Namespace, r: RestClient) -> Any:
    """The check's report when nothing is damaged; else an error (exit code 1) naming each
    damaged segment, its file, byte and problem (in a cluster: node and entries).
    ``--repair``: damaged replicas are written again from good ones before the check."""
    if a.repair:
        report = r.call("POST", _t(a, "/check?repair=true"))
    else:
        report = r.call("GET", _t(a, "/check"))
    if report["ok"]:
        return report
    rows = [row for part in report.get("partitions", [report]) for row in part["ledgers"]]
    damaged = [f"segment {x['segmentId']}: {x['error']}" for x in rows if x["error"]]
    raise AdminCallError(
        f"{report['topic']}: {len(damaged)} damaged segment(s):\n  " + "\n  ".join(damaged)
    )


TOPICS: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    (
        "list",
        "list the topics of a namespace",
        [(["namespace"], {"help": "TENANT/NAMESPACE"})],
        lambda a, r: r.call("GET", "/admin/v2/persistent/" + a.namespace),
    ),
    ("create", "create a non-partitioned topic", _TOPIC, lambda a, r: r.call("PUT", _t(a))),
    (
        "create-partitioned-topic",
        "create a partitioned topic",
        [*_TOPIC, (["--partitions", "-p"], {"type": int, "required": True})],
        lambda a, r: r.call("PUT", _t(a, "/partitions"), a.partitions),
    ),
    (
        "update-partitioned-topic",
        "add partitions",
        [*_TOPIC, (["--partitions", "-p"], {"type": int, "required": True})],
        lambda a, r: r.call("POST", _t(a, "/partitions"), a.partitions),
    ),
    (
        "get-partitioned-topic-metadata",
        "",
        _TOPIC,
        lambda a, r: r.call("GET", _t(a, "/partitions")),
    ),
    ("delete", "delete a topic", [*_TOPIC, _FORCE], lambda a, r: r.call("DELETE", _t(a) + _q(a))),
    (
        "delete-partitioned-topic",
        "",
        [*_TOPIC, _FORCE],
        lambda a, r: r.call("DELETE", _t(a, "/partitions") + _q(a)),
    ),
    (
        "stats",
        "rates, backlog, producers, consumers (a partitioned topic's summed over partitions)",
        _TOPIC,
        lambda a, r: _stats(a, r, "stats", "partitioned-stats?perPartition=false"),
    ),
    (
        "partitioned-stats",
        "a partitioned topic's stats summed over its partitions",
        [*_TOPIC, (["--per-partition"], {"action": "store_true", "help": "each one's too"})],
        _partitioned_stats,
    ),
    (
        "stats-internal",
        "segments and cursors (of each partition, for a partitioned topic)",
        _TOPIC,
        lambda a, r: _stats(a, r, "internal-stats", "partitioned-internalStats"),
    ),
    (
        "check",
        "read and verify every stored entry; exit 1 naming each damaged segment's file and byte",
        [
            *_TOPIC,
            (
                ["--repair"],
                {
                    "action": "store_true",
                    "help": "first write damaged replicas of a cluster's closed ledgers "
                    "again from good ones",
                },
            ),
        ],
        _check,
    ),
    ("last-message-id", "", _TOPIC, lambda a, r: r.call("GET", _t(a, "/lastMessageId"))),
    (
        "set-deduplication",
        "turn deduplication on or off for this topic (a topic policy over the namespace's)",
        [
            *_TOPIC,
            (["--enable", "-e"], {"action": "store_true"}),
            (["--disable", "-d"], {"action": "store_true"}),
        ],
        lambda a, r: r.call("POST", _t(a, "/deduplicationEnabled"), _enable(a)),
    ),
    (
        "get-deduplication",
        "the topic's own deduplication setting (null: none); --applied: the one in force",
        [*_TOPIC, (["--applied"], {"action": "store_true"})],
        lambda a, r: r.call(
            "GET", _t(a, "/deduplicationEnabled" + ("?applied=true" if a.applied else ""))
        ),
    ),
    (
        "remove-deduplication",
        "drop the topic's deduplication setting: the namespace's applies again",
        _TOPIC,
        lambda a, r: r.call("DELETE", _t(a, "/deduplicationEnabled")),
    ),
    (
        "subscriptions",
        "list subscriptions",
        _TOPIC,
        lambda a, r: r.call("GET", _t(a, "/subscriptions")),
    ),
]

SUBSCRIPTIONS: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    ("list", "list subscriptions", _TOPIC, lambda a, r: r.call("GET", _t(a, "/subscriptions"))),
    (
        "create",
        "create a subscription at a position",
        [*_SUB, (["--messageId", "-m"], {"dest": "message_id", "default": "latest"})],
        lambda a, r: r.call("PUT", _s(a), _position(a.message_id)),
    ),
    (
        "delete",
        "delete a subscription",
        [*_SUB, _FORCE],
        lambda a, r: r.call("DELETE", _s(a) + _q(a)),
    ),
    (
        "skip",
        "skip N messages",
        [*_SUB, (["--count", "-n"], {"type": int, "required": True})],
        lambda a, r: r.call("POST", _s(a, f"/skip/{a.count}")),
    ),
    ("skip-all", "skip the whole backlog", _SUB, lambda a, r: r.call("POST", _s(a, "/skip_all"))),
    (
        "reset-cursor",
        "move to a publish time (epoch ms, or relative: 10m)",
        [*_SUB, (["--time", "-t"], {"type": _timestamp, "required": True})],
        lambda a, r: r.call("POST", _s(a, f"/resetcursor/{a.time}")),
    ),
]


def _offload(a: argparse.Namespace, r: RestClient) -> Any:
    started = r.call("PUT", _t(a, "/offload"), _position(a.message_id))
    return watch_offload(r, _t(a)) if a.wait else started


TOPICS += [
    (
        "offload",
        "offload closed segments to the object store (all, or those before -m LEDGER:ENTRY)",
        [
            *_TOPIC,
            (["--messageId", "-m"], {"dest": "message_id", "default": "latest"}),
            (["--wait"], {"action": "store_true", "help": "show progress until done"}),
        ],
        _offload,
    ),
    ("offload-status", "", _TOPIC, lambda a, r: r.call("GET", _t(a, "/offload"))),
    (
        "iceberg",
        "the topic's Iceberg table: identifier, current snapshot, offsets covered, lag",
        _TOPIC,
        lambda a, r: r.call("GET", _t(a, "/iceberg")),
    ),
]


def _compact(a: argparse.Namespace, r: RestClient) -> Any:
    r.call("PUT", _t(a, "/compaction"))
    status = r.call("GET", _t(a, "/compaction"))
    while a.wait and status["status"] == "RUNNING":
        time.sleep(0.2)
        status = r.call("GET", _t(a, "/compaction"))
    if status["status"] == "ERROR":
        raise AdminCallError(f"compaction failed: {status['lastError']}")
    return status


TOPICS += [
    (
        "compact",
        "keep the latest message of each key in the topic's compacted view",
        [*_TOPIC, (["--wait"], {"action": "store_true", "help": "return once it has finished"})],
        _compact,
    ),
    ("compaction-status", "", _TOPIC, lambda a, r: r.call("GET", _t(a, "/compaction"))),
]


# pulsar-admin spells these as topics subcommands too.
def _actions(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


_GRANT: list[Arg] = [
    (["--role"], {"required": True, "help": "the role granted"}),
    (["--actions"], {"required": True, "help": "comma-separated: produce,consume,functions..."}),
]
NAMESPACES += [
    (
        "grant-permission",
        "grant a role actions on every topic of the namespace",
        [*_NS, *_GRANT],
        lambda a, r: r.call("POST", _ns(a, f"/permissions/{a.role}"), _actions(a.actions)),
    ),
    (
        "revoke-permission",
        "take a role's namespace grant away",
        [*_NS, (["--role"], {"required": True})],
        lambda a, r: r.call("DELETE", _ns(a, f"/permissions/{a.role}")),
    ),
    (
        "permissions",
        "roles and their actions",
        _NS,
        lambda a, r: r.call("GET", _ns(a, "/permissions")),
    ),
    (
        "grant-subscription-permission",
        "reserve a subscription name to roles",
        [*_NS, (["--subscription", "-s"], {"required": True}), (["--roles"], {"required": True})],
        lambda a, r: r.call(
            "POST", _ns(a, f"/permissions/subscription/{a.subscription}"), _actions(a.roles)
        ),
    ),
]
TOPICS += [
    (
        "grant-permission",
        "grant a role actions on the topic",
        [*_TOPIC, *_GRANT],
        lambda a, r: r.call("POST", _t(a, f"/permissions/{a.role}"), _actions(a.actions)),
    ),
    (
        "revoke-permission",
        "take a role's topic grant away",
        [*_TOPIC, (["--role"], {"required": True})],
        lambda a, r: r.call("DELETE", _t(a, f"/permissions/{a.role}")),
    ),
    (
        "permissions",
        "roles and their actions",
        _TOPIC,
        lambda a, r: r.call("GET", _t(a, "/permissions")),
    ),
]

TOPICS += [
    ("create-subscription", *SUBSCRIPTIONS[1][1:]),
    ("unsubscribe", *SUBSCRIPTIONS[2][1:]),
    ("skip", *SUBSCRIPTIONS[3][1:]),
    ("skip-all", *SUBSCRIPTIONS[4][1:]),
    ("reset-cursor", *SUBSCRIPTIONS[5][1:]),
]


def _storage_nodes(_a: argparse.Namespace, r: RestClient) -> list[str]:
    nodes = r.call("GET", "/admin/v2/storage-nodes")
    return [
        f"{n['node_id']}  {n['mode']}  {n['free_bytes'] / (1 << 30):.1f} GiB free" for n in nodes
    ]


def _under_replicated(_a: argparse.Namespace, r: RestClient) -> list[str]:
    got = r.call("GET", "/admin/v2/storage-nodes/under-replicated")
    lines = [f"ledger {lid}: lost {', '.join(nodes)}" for lid, nodes in got["ledgers"].items()]
    lines.append(
        f"{len(got['ledgers'])} under-replicated ledger(s); re-replicated so far: "
        f"{got['fragmentsCopied']} fragment(s), {got['entriesCopied']} entries"
    )
    return lines


STORAGE_NODES: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    (
        "list",
        "storage nodes with their free space and mode (read-write/read-only)",
        [],
        _storage_nodes,
    ),
    (
        "under-replicated",
        "ledgers naming a lost node; re-replication progress",
        [],
        _under_replicated,
    ),
]

BROKERS: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    ("list", "live brokers", [], lambda a, r: r.call("GET", "/admin/v2/brokers")),
]

SCRAM: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Action]] = [
    ("list", "Kafka SCRAM users and their mechanisms", [],
     lambda a, r: r.call("GET", "/magnetar/v1/scram")),
    (
        "set",
        "set a user's SCRAM credential (stored salted)",
        [
            (["user"], {}),
            (["--password"], {"required": True}),
            (["--mechanism", "-m"], {"default": "SCRAM-SHA-256",
                                     "choices": ("SCRAM-SHA-256", "SCRAM-SHA-512")}),
            (["--iterations"], {"type": int, "default": 8192}),
        ],
        lambda a, r: r.call("PUT", f"/magnetar/v1/scram/{a.user}",
                            {"mechanism": a.mechanism, "password": a.password,
                             "iterations": a.iterations}),
    ),
    (
        "delete",
        "remove a user's SCRAM credential",
        [(["user"], {}), (["--mechanism", "-m"], {"default": "SCRAM-SHA-256"})],
        lambda a, r: r.call("DELETE", f"/magnetar/v1/scram/{a.user}/{a.mechanism}"),
    ),
]  # fmt: skip

GROUPS = {
    "tenants": ("manage tenants", TENANTS),
    "namespaces": ("manage namespaces and their policies", NAMESPACES),
    "topics": ("manage topics", TOPICS),
    "subscriptions": ("manage subscriptions", SUBSCRIPTIONS),
    "storage-nodes": ("list the cluster's storage nodes", STORAGE_NODES),
    "brokers": ("list the cluster's brokers", BROKERS),
    "scram": ("Kafka SCRAM-SHA-256/512 users", SCRAM),
}


def add_admin(commands: Any) -> None:
    admin = commands.add_parser(
        "admin", help="administer tenants, namespaces, topics, subscriptions"
    )
    admin.add_argument(
        "--url", default=None, help="admin URL (default MAGNETAR_URL, else from MAGNETAR_HTTP_PORT)"
    )
    admin.add_argument("--json", action="store_true", help="print results as JSON")
    admin.add_argument(
        "--token", default=None, help="token sent as Authorization: Bearer (default MAGNETAR_TOKEN)"
    )
    groups = admin.add_subparsers(dest="group", metavar="GROUP", required=True)
    for group, (text, table) in GROUPS.items():
        parser = groups.add_parser(group, help=text)
        subs = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        for name, help_text, args, action in table:
            p = subs.add_parser(name, help=help_text or None, description=help_text or None)
            for flags, options in args:
                p.add_argument(*flags, **options)
            p.set_defaults(admin_action=action)
