"""The ``magnetar`` command. Follows pulsar-admin habits: subcommands, ``--help`` at every
level, a readable message and a non-zero exit code on any error."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import signal
import sys
from collections.abc import Sequence

from magnetar import __version__
from magnetar.cli.admin import add_admin
from magnetar.cli.client import add_client
from magnetar.cli.cluster import add_cluster
from magnetar.cli.rest import RestClient, admin_url
from magnetar.cli.tokens import add_tokens
from magnetar.cli.views import add_views
from magnetar.core.config import Settings, build_settings
from magnetar.core.errors import MagnetarError

EXIT_ERROR = 1
EXIT_USAGE = 2

# (flag, setting, type, help)
_STANDALONE_FLAGS: list[tuple[str, str, type, str]] = [
    ("--data-dir", "data_dir", str, "where data lives (default ./data)"),
    ("--journal-dir", "journal_dir", str, "journal directory (default DATA_DIR/journal)"),
    ("--ledger-dir", "ledger_dir", str, "segment directory (default DATA_DIR/ledgers)"),
    ("--metadata-url", "metadata_url", str, "metadata store (default sqlite:///DATA_DIR/...)"),
    ("--fsync", "fsync", str, "journal fsync policy: always | interval:<ms> | never"),
    ("--segment-max-bytes", "segment_max_bytes", int, "roll a segment at this size"),
    ("--segment-max-age", "segment_max_age", float, "roll a segment after SECONDS (0: never)"),
    ("--segment-max-entries", "segment_max_entries", int, "roll after N entries (0: no limit)"),
    ("--index-interval-bytes", "index_interval_bytes", int, "bytes between index entries"),
    ("--journal-max-bytes", "journal_max_bytes", int, "rotate journal files at this size"),
    ("--bind-address", "bind_address", str, "address the listeners bind to"),
    ("--advertised-address", "advertised_address", str, "address given to clients"),
    (
        "--advertised-listeners",
        "advertised_listeners",
        str,
        "Pulsar listeners by name: internal:pulsar://HOST:PORT,external:pulsar://HOST:PORT",
    ),
    ("--pulsar-port", "pulsar_port", int, "Pulsar binary protocol port (default 6650)"),
    ("--http-port", "http_port", int, "admin REST / HTTP port (default 8080)"),
    (
        "--expose-topic-level-metrics",
        "expose_topic_level_metrics",
        str,
        "/metrics series per topic: true (default) | false (summed per namespace)",
    ),
    ("--kafka-port", "kafka_port", int, "Kafka protocol port (default 9092)"),
    ("--kafka-namespace", "kafka_namespace", str, "namespace of Kafka topics (public/default)"),
    ("--tls-enabled", "tls_enabled", str, "open the TLS listeners below: true | false (default)"),
    ("--pulsar-tls-port", "pulsar_tls_port", int, "pulsar+ssl:// port (default 6651)"),
    ("--https-port", "https_port", int, "HTTPS admin REST / lookup port (default 8443)"),
    ("--kafka-ssl-port", "kafka_ssl_port", int, "Kafka SSL listener port (default 9093)"),
    ("--tls-certificate-file", "tls_certificate_file", str, "PEM certificate chain of the node"),
    ("--tls-key-file", "tls_key_file", str, "PEM private key of the node (unencrypted)"),
    ("--tls-trust-certs-file", "tls_trust_certs_file", str, "PEM CAs that sign client certs"),
    (
        "--tls-require-trusted-client-cert",
        "tls_require_trusted_client_cert",
        str,
        "refuse TLS clients without a trusted certificate (mTLS): true | false (default)",
    ),
    (
        "--authentication-enabled",
        "authentication_enabled",
        str,
        "clients must authenticate: true | false (default: anyone who reaches a port)",
    ),
    (
        "--authentication-providers",
        "authentication_providers",
        str,
        "comma-separated: token, basic, tls (default token)",
    ),
    ("--token-secret-key", "token_secret_key", str, "HS256 key: file:///PATH or data:;base64,"),
    ("--token-public-key", "token_public_key", str, "RS256/ES256 public key: file:///PATH"),
    ("--token-auth-claim", "token_auth_claim", str, "claim naming the role (default sub)"),
    ("--basic-auth-conf", "basic_auth_conf", str, "htpasswd file of the basic provider"),
    ("--anonymous-user-role", "anonymous_user_role", str, "role of clients sending nothing"),
    (
        "--authentication-refresh-check-seconds",
        "authentication_refresh_check_seconds",
        float,
        "how often Pulsar connections are checked for an expired token (default 60)",
    ),
    (
        "--authorization-enabled",
        "authorization_enabled",
        str,
        "check roles' permissions (needs authentication): true | false (default)",
    ),
    ("--superuser-roles", "superuser_roles", str, "comma-separated roles that may do everything"),
    (
        "--allow-everyone-if-no-acl-found",
        "allow_everyone_if_no_acl_found",
        str,
        "with authorization, a resource nobody holds a permission on is open to all, and "
        "authentication is optional (role ANONYMOUS): true | false (default)",
    ),
    (
        "--broker-client-auth-token",
        "broker_client_auth_token",
        str,
        "token this node's own clients (views, calls to other brokers) present: a JWT or "
        "file:///PATH",
    ),
    (
        "--broker-client-tls-enabled",
        "broker_client_tls_enabled",
        str,
        "call other brokers on their https:// addresses: true | false (default)",
    ),
    (
        "--broker-client-trust-certs-file",
        "broker_client_trust_certs_file",
        str,
        "PEM CAs other brokers' and storage nodes' certificates are checked against",
    ),
    (
        "--broker-client-certificate-file",
        "broker_client_certificate_file",
        str,
        "PEM certificate offered to brokers and storage nodes that require one",
    ),
    ("--broker-client-key-file", "broker_client_key_file", str, "its PEM private key"),
    ("--group-min-session-timeout-ms", "group_min_session_timeout_ms", int, "shortest session ms"),
    ("--group-max-session-timeout-ms", "group_max_session_timeout_ms", int, "longest session ms"),
    (
        "--group-consumer-heartbeat-interval-ms",
        "group_consumer_heartbeat_interval_ms",
        int,
        "heartbeat interval of group.protocol=consumer members (5000)",
    ),
    (
        "--group-consumer-session-timeout-ms",
        "group_consumer_session_timeout_ms",
        int,
        "session timeout of group.protocol=consumer members (45000)",
    ),
    ("--flight-port", "flight_port", int, "Arrow Flight bulk-read port (default 8815)"),
    ("--deduplication", "deduplication_enabled", str, "broker-wide dedup default: true|false"),
    (
        "--allow-auto-topic-creation",
        "allow_auto_topic_creation",
        str,
        "create unknown topics on first use: true (default) | false",
    ),
    ("--schema-compatibility", "schema_compatibility_strategy", str, "default strategy (FULL)"),
    ("--max-message-size", "max_message_size", int, "largest message or batch in bytes"),
    ("--max-connections", "max_connections", int, "open connections per listener (0: no cap)"),
    (
        "--max-connections-per-ip",
        "max_connections_per_ip",
        int,
        "open connections from one address per listener (0: no cap)",
    ),
    ("--handshake-timeout-ms", "handshake_timeout_ms", int, "close a silent new connection"),
    (
        "--keep-alive-interval-seconds",
        "keep_alive_interval_seconds",
        float,
        "PING an idle Pulsar connection this often; close it if silent one more interval (30)",
    ),
    (
        "--connections-max-idle-ms",
        "connections_max_idle_ms",
        int,
        "close a Kafka connection idle this long (0: never)",
    ),
    (
        "--max-pending-publish-requests-per-connection",
        "max_pending_publish_requests_per_connection",
        int,
        "Pulsar SENDs in flight before reading the socket pauses",
    ),
    (
        "--max-pending-publish-bytes-per-connection",
        "max_pending_publish_bytes_per_connection",
        int,
        "bytes of requests in flight before reading the socket pauses",
    ),
    (
        "--http-idle-timeout-ms",
        "http_idle_timeout_ms",
        int,
        "close an HTTP connection idle this long",
    ),
    (
        "--max-unacked-messages-per-consumer",
        "max_unacked_messages_per_consumer",
        int,
        "Shared/Key_Shared consumer stops getting messages at N unacked (0: no cap)",
    ),
    (
        "--max-unacked-messages-per-subscription",
        "max_unacked_messages_per_subscription",
        int,
        "Shared/Key_Shared subscription stops dispatching at N unacked (0: no cap)",
    ),
    (
        "--auto-skip-non-recoverable-data",
        "auto_skip_non_recoverable_data",
        str,
        "subscriptions skip damaged entries instead of waiting there: true | false (default)",
    ),
    (
        "--max-num-partitions-per-partitioned-topic",
        "max_num_partitions_per_partitioned_topic",
        int,
        "partitions of one partitioned topic (0: no cap)",
    ),
    (
        "--max-topics-per-namespace",
        "max_topics_per_namespace",
        int,
        "topics of one namespace, partitions counted (0: no cap)",
    ),
    ("--fetch-max-bytes", "fetch_max_bytes", int, "largest Kafka fetch response in bytes"),
    ("--tail-cache-bytes", "tail_cache_bytes", int, "node-wide cache of the newest entries"),
    (
        "--max-open-segment-files",
        "max_open_segment_files",
        int,
        "segment files open at once; idle ones beyond are closed (at most half of ulimit -n)",
    ),
    ("--retention-check-interval", "retention_check_interval", float, "seconds between sweeps"),
    ("--tier-url", "tier_url", str, "object store: file:///DIR or s3://BUCKET/PREFIX?endpoint=.."),
    ("--offload-check-interval", "offload_check_interval", float, "seconds between sweeps"),
    ("--offload-row-group-rows", "offload_row_group_rows", int, "Parquet row group size"),
    ("--offload-deletion-lag-ms", "offload_deletion_lag_ms", int, "default local-copy lag"),
    (
        "--iceberg-catalog",
        "iceberg_catalog",
        str,
        "catalog offloaded topics are Iceberg tables in: sqlite (default), rest or none",
    ),
    (
        "--iceberg-catalog-url",
        "iceberg_catalog_url",
        str,
        "sqlite:///PATH (default DATA_DIR/iceberg.db) or the REST catalog's http(s) URI",
    ),
    (
        "--iceberg-snapshot-max-age-ms",
        "iceberg_snapshot_max_age_ms",
        int,
        "table maintenance expires snapshots older than this (default 1 h)",
    ),
    (
        "--iceberg-min-snapshots",
        "iceberg_min_snapshots",
        int,
        "table maintenance keeps at least this many newest snapshots (default 10)",
    ),
    ("--spark-master", "spark_master", str, "Spark master for views (default local[*])"),
    ("--spark-driver-memory", "spark_driver_memory", str, "Spark driver memory (default 2g)"),
    ("--views-max-batch-events", "views_max_batch_events", int, "events per view micro-batch"),
    ("--views-trigger-ms", "views_trigger_ms", int, "view micro-batch interval (0: no wait)"),
    (
        "--views-python-path",
        "views_python_path",
        str,
        "directories Python views may be imported from, ':'-separated (default: none)",
    ),
]

# the broker's extra flags: how its ledgers are replicated over storage nodes
_REPLICATION_FLAGS: list[tuple[str, str, type, str]] = [
    ("--ensemble-size", "ensemble_size", int, "E: storage nodes per ledger (default 2)"),
    ("--write-quorum", "write_quorum", int, "Qw: copies of each entry (default 2)"),
    ("--ack-quorum", "ack_quorum", int, "Qa: copies on disk before an ack (default 2)"),
    ("--add-timeout-ms", "add_timeout_ms", int, "replace a storage node slower than this"),
    (
        "--rereplication-grace-s",
        "rereplication_grace_s",
        float,
        "copy a lost storage node's ledgers elsewhere after it is gone this long (default 30)",
    ),
    (
        "--load-balancer-shedding-enabled",
        "load_balancer_shedding_enabled",
        str,
        "the leader broker moves bundles off overloaded brokers: true (default) | false",
    ),
    (
        "--load-balancer-shedding-interval-s",
        "load_balancer_shedding_interval_s",
        float,
        "how often the leader compares the brokers' loads (default 60)",
    ),
    (
        "--load-balancer-shedding-grace-s",
        "load_balancer_shedding_grace_s",
        float,
        "a bundle moved by shedding is not moved again for this long (default 1800)",
    ),
]
_STORAGE_NODE_FLAGS: list[tuple[str, str, type, str]] = [
    ("--data-dir", "data_dir", str, "where the node's entries live (default ./data)"),
    ("--journal-dir", "journal_dir", str, "journal directory (default DATA_DIR/journal)"),
    ("--ledger-dir", "ledger_dir", str, "entry-file directory (default DATA_DIR/ledgers)"),
    ("--metadata-url", "metadata_url", str, "the cluster's ZooKeeper: zk://HOST:PORT[/chroot]"),
    ("--bind-address", "bind_address", str, "address the node listens on"),
    ("--advertised-address", "advertised_address", str, "address brokers reach it at"),
    ("--port", "storage_port", int, "storage protocol port (default 3181)"),
    ("--flight-port", "flight_port", int, "Arrow Flight bulk reads of its ledgers (8815)"),
    ("--fsync", "fsync", str, "journal fsync policy: always | interval:<ms> | never"),
    ("--min-free-bytes", "storage_min_free_bytes", int, "read-only below this free space"),
    ("--max-message-size", "max_message_size", int, "the cluster's largest message in bytes"),
    ("--segment-max-bytes", "segment_max_bytes", int, "roll an entry file at this size"),
    ("--segment-max-entries", "segment_max_entries", int, "roll after N entries (0: no limit)"),
    ("--tls-enabled", "tls_enabled", str, "the node port speaks TLS: true | false (default)"),
    ("--tls-certificate-file", "tls_certificate_file", str, "PEM certificate chain of the node"),
    ("--tls-key-file", "tls_key_file", str, "PEM private key of the node (unencrypted)"),
    ("--tls-trust-certs-file", "tls_trust_certs_file", str, "PEM CAs that sign brokers' certs"),
    (
        "--tls-require-trusted-client-cert",
        "tls_require_trusted_client_cert",
        str,
        "only brokers with a trusted certificate may connect (mTLS): true | false (default)",
    ),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magnetar",
        description="Magnetar: a Pulsar-style event store with Kafka and Spark built in.",
    )
    parser.add_argument("--version", action="version", version=f"magnetar {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    standalone = commands.add_parser(
        "standalone",
        help="run every part of Magnetar in one process",
        description="Run Magnetar in one process. Settings come from defaults, --config, "
        "MAGNETAR_* environment variables and these flags, in that order of precedence.",
    )
    standalone.add_argument("--config", "-c", help="TOML settings file")
    standalone.add_argument("--pulsar-conf", help="a Pulsar broker.conf / standalone.conf")
    for flag, dest, kind, text in _STANDALONE_FLAGS:
        standalone.add_argument(flag, dest=dest, type=kind, help=text)
    standalone.set_defaults(handler=_standalone, flags=_STANDALONE_FLAGS)
    broker = commands.add_parser(
        "broker",
        help="run a broker that stores its ledgers on the cluster's storage nodes",
        description="Run a broker: the Pulsar, Kafka and HTTP ports of `standalone`, its "
        "ledgers replicated over the storage nodes registered in --metadata-url "
        "(zk://HOST:PORT[/chroot]).",
    )
    broker.add_argument("--config", "-c", help="TOML settings file")
    broker.add_argument("--pulsar-conf", help="a Pulsar broker.conf / standalone.conf")
    for flag, dest, kind, text in _STANDALONE_FLAGS + _REPLICATION_FLAGS:
        broker.add_argument(flag, dest=dest, type=kind, help=text)
    broker.set_defaults(handler=_broker, flags=_STANDALONE_FLAGS + _REPLICATION_FLAGS)
    node = commands.add_parser(
        "storage-node",
        help="run a storage node: stores replicated ledgers for brokers",
        description="Run a storage node (BookKeeper's bookie): a journal fsynced before "
        "each answer, entries of many ledgers, registered in --metadata-url.",
    )
    node.add_argument("--config", "-c", help="TOML settings file")
    for flag, dest, kind, text in _STORAGE_NODE_FLAGS:
        node.add_argument(flag, dest=dest, type=kind, help=text)
    node.set_defaults(handler=_storage_node, flags=_STORAGE_NODE_FLAGS)
    add_cluster(commands)
    add_admin(commands)
    add_client(commands)
    add_views(commands)
    add_tokens(commands)
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    flags = getattr(args, "flags", _STANDALONE_FLAGS)
    overrides = {dest: getattr(args, dest, None) for _, dest, _, _ in flags}
    pulsar_conf = getattr(args, "pulsar_conf", None)
    return build_settings(config_file=args.config, overrides=overrides, pulsar_conf=pulsar_conf)


def _require_zookeeper(settings: Settings, command: str) -> None:
    if not settings.metadata_url.startswith("zk://"):
        raise MagnetarError(
            f"`magnetar {command}` needs the cluster's ZooKeeper: pass --metadata-url "
            "zk://HOST:PORT[/chroot] (or set MAGNETAR_METADATA_URL)"
        )


def _broker(args: argparse.Namespace) -> int:
    from magnetar.core.dirlock import lock_directories, node_directories
    from magnetar.core.resources import bound_allocator, raise_fd_limit

    settings = settings_from_args(args)
    _require_zookeeper(settings, "broker")
    locks = lock_directories(node_directories(settings))
    bound_allocator()
    raise_fd_limit()
    from magnetar.standalone import serve

    try:
        asyncio.run(serve(settings, replicated=True))
    finally:
        for lock in locks:
            lock.release()
    return 0


def _storage_node(args: argparse.Namespace) -> int:
    from magnetar.core.dirlock import lock_directories, node_directories
    from magnetar.core.resources import raise_fd_limit

    settings = settings_from_args(args)
    _require_zookeeper(settings, "storage-node")
    locks = lock_directories(node_directories(settings))  # one node per data directory
    raise_fd_limit()
    from magnetar.cluster.node import serve

    try:
        asyncio.run(serve(settings))
    finally:
        for lock in locks:
            lock.release()
    return 0


def _standalone(args: argparse.Namespace) -> int:
    from magnetar.core.dirlock import lock_directories, node_directories
    from magnetar.core.resources import bound_allocator, raise_fd_limit

    settings = settings_from_args(args)
    # one node per directory: a second one exits here, naming the holder's pid
    locks = lock_directories(node_directories(settings))
    bound_allocator()  # before any thread starts: keeps RSS at the cache budgets
    raise_fd_limit()
    from magnetar.standalone import serve

    try:
        asyncio.run(serve(settings))
    finally:
        for lock in locks:
            lock.release()
    return 0


def _admin(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("MAGNETAR_TOKEN") or None
    result = args.admin_action(args, RestClient(admin_url(args.url), token=token))
    if args.json:
        print(json.dumps(result if result is not None else {"ok": True}, indent=2))
    elif result is None:
        print("ok")
    elif isinstance(result, list):
        print("\n".join(str(x) for x in result))
    elif isinstance(result, dict):
        print(json.dumps(result, indent=2))
    else:
        print(result)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # `kill -USR1 PID` prints every thread's stack to stderr (as jstack does for a JVM):
    # what a hung server is waiting on, without stopping it
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args.command == "admin":
        args.handler = _admin
    try:
        code: int = args.handler(args)
    except MagnetarError as e:
        print(f"magnetar: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_ERROR
    except BrokenPipeError:  # `magnetar ... | head`: the reader left early; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    return code
