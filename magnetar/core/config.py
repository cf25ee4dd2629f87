"""One validated settings object, built from defaults, a TOML file, the environment and flags.

Precedence, lowest first: the defaults below, an optional TOML file (``--config``), the
``MAGNETAR_<NAME>`` environment variables, then explicit command-line flags. Every value is
checked once, here; a bad value raises :class:`ConfigError` naming the setting, so a server
never starts half-configured.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.core.errors import ConfigError
from magnetar.core.pulsar_conf import read_pulsar_conf, translate
from magnetar.core.tls import TlsFiles, client_context

if TYPE_CHECKING:
    from magnetar.core.authentication import Authenticator

ENV_PREFIX = "MAGNETAR_"
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FsyncPolicy:
    """When the journal is forced to disk: ``always`` (before each ack), ``interval``, ``never``."""

    mode: str  # "always" | "interval" | "never"
    interval_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> FsyncPolicy:
        text = text.strip().lower()
        if text in ("always", "never"):
            return cls(text)
        if text.startswith("interval:"):
            raw = text.split(":", 1)[1]
            if raw.isdigit() and int(raw) > 0:
                return cls("interval", int(raw))
        raise ConfigError("fsync", f"unknown policy {text!r}: use always, interval:<ms> or never")

    def __str__(self) -> str:
        return f"interval:{self.interval_ms}" if self.mode == "interval" else self.mode


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of a Magnetar node. Paths left empty derive from ``data_dir``."""

    data_dir: Path = Path("data")
    journal_dir: Path | None = None  # default DATA_DIR/journal; may sit on its own disk
    ledger_dir: Path | None = None  # default DATA_DIR/ledgers
    metadata_url: str = ""  # default sqlite:///DATA_DIR/metadata.db
    fsync: FsyncPolicy = field(default_factory=lambda: FsyncPolicy("always"))
    journal_max_bytes: int = 64 * MiB
    segment_max_bytes: int = 128 * MiB
    segment_max_age: float = 0.0  # seconds; 0 = no age limit
    segment_max_entries: int = 0  # 0 = no limit
    index_interval_bytes: int = 4096  # bytes between a segment's offset/time index entries
    tail_cache_bytes: int = 512 * MiB  # newest entries of all partitions, per node
    # segment files held open at once, node-wide (BookKeeper's openFileLimit); idle ones
    # beyond it are closed and reopened on demand. At most half the open-file limit is used
    max_open_segment_files: int = 1024
    bind_address: str = "127.0.0.1"
    advertised_address: str = ""  # default: bind_address
    # Pulsar listeners named in LOOKUP answers: "internal:pulsar://h:p,external:pulsar://h:p"
    advertised_listeners: str = ""
    pulsar_port: int = 6650
    http_port: int = 8080
    # a /metrics series per topic and subscription (Pulsar's exposeTopicLevelMetricsInPrometheus);
    # off: summed per namespace, for nodes with many topics
    expose_topic_level_metrics: bool = True
    kafka_port: int = 9092
    # TLS listeners (docs/security.md), on ports of their own as Pulsar's
    # brokerServicePortTls / webServicePortTls and a Kafka SSL listener; off by default
    tls_enabled: bool = False
    pulsar_tls_port: int = 6651  # pulsar+ssl://
    https_port: int = 8443  # admin REST, lookup and views over HTTPS
    kafka_ssl_port: int = 9093  # Kafka security.protocol=SSL
    tls_certificate_file: str = ""  # PEM certificate chain of this node
    tls_key_file: str = ""  # its PEM private key (unencrypted)
    tls_trust_certs_file: str = ""  # PEM CAs client certificates are verified against
    # refuse a TLS client without a certificate signed by a trusted CA (mTLS; Pulsar's
    # tlsRequireTrustedClientCertOnConnect)
    tls_require_trusted_client_cert: bool = False
    # authentication (docs/security.md): every listener asks clients who they are
    authentication_enabled: bool = False
    # comma-separated: token, basic, tls (or Pulsar's AuthenticationProvider* class names)
    authentication_providers: str = "token"
    token_secret_key: str = ""  # HS256 key: file:///PATH, data:;base64,..., or a path
    token_public_key: str = ""  # RS256 / ES256 public key (DER or PEM), same forms
    token_auth_claim: str = "sub"  # the claim naming the role
    basic_auth_conf: str = ""  # htpasswd-style file of the basic provider
    # the role of a client that sends no credential; empty: such clients are refused
    anonymous_user_role: str = ""
    # how often long-lived Pulsar connections are checked for an expired credential (which
    # is then refreshed through AUTH_CHALLENGE, or the connection closed)
    authentication_refresh_check_seconds: float = 60.0
    # authorization (needs authentication): super-users, tenant admins and granted actions
    authorization_enabled: bool = False
    superuser_roles: str = ""  # comma-separated roles that may do everything
    # Kafka's allow.everyone.if.no.acl.found: with authorization on, a resource nobody holds
    # a permission on is open to every role; authorization may then run without
    # authentication (clients that prove nothing are the role ANONYMOUS)
    allow_everyone_if_no_acl_found: bool = False
    # the credential this node's own clients present (its views' reads of their sources): a
    # JWT or file:///PATH (Pulsar's brokerClientAuthenticationParameters); give its role
    # super-user rights
    broker_client_auth_token: str = ""
    # a broker's calls to the other brokers (remote Spark plans, forwarded Kafka offsets,
    # unloads) go to their https:// addresses (Pulsar's brokerClientTlsEnabled)
    broker_client_tls_enabled: bool = False
    # what this node's TLS connections to other brokers and to storage nodes check the
    # server against (default: tls_trust_certs_file, else the system's CAs) and the
    # certificate they offer to peers that require one (default: tls_certificate_file /
    # tls_key_file); Pulsar's brokerClientTrustCertsFilePath, brokerClientCertificateFilePath,
    # brokerClientKeyFilePath
    broker_client_trust_certs_file: str = ""
    broker_client_certificate_file: str = ""
    broker_client_key_file: str = ""
    kafka_namespace: str = "public/default"  # Kafka topic NAME = persistent://<this>/NAME
    # session timeouts a Kafka group member may ask for (Kafka's group.min/max.session.timeout.ms)
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 30 * 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000  # KIP-848 members heartbeat this often
    group_consumer_session_timeout_ms: int = 45_000  # KIP-848 members silent this long are dropped
    flight_port: int = 8815
    deduplication_enabled: bool = False  # broker-wide default; namespaces may override
    schema_compatibility_strategy: str = "FULL"  # Pulsar's broker default (namespace UNDEFINED)
    max_message_size: int = 5 * MiB
    # open connections of each of the Pulsar and Kafka listeners; more are closed as they are
    # accepted (Pulsar's brokerMaxConnections, Kafka's max.connections; 0: no cap)
    max_connections: int = 10_000
    # ... from one client address (Pulsar's maxConnectionsPerIp, Kafka's
    # max.connections.per.ip; 0: no cap)
    max_connections_per_ip: int = 1_000
    # a connection that has not sent its handshake (Pulsar CONNECT, a whole Kafka request)
    # this long after it opened is closed (Pulsar: keepAliveIntervalSeconds, 30 s)
    handshake_timeout_ms: int = 30_000
    # after CONNECT, a Pulsar connection silent this long is sent a PING; one that has sent
    # nothing (PONG or else) one interval later is closed (Pulsar's keepAliveIntervalSeconds)
    keep_alive_interval_seconds: float = 30.0
    # a Kafka connection with no bytes either way and nothing pending for this long is closed
    # (Kafka's connections.max.idle.ms; 0: never)
    connections_max_idle_ms: int = 600_000
    # SENDs of one Pulsar connection being stored before it stops reading that socket; it
    # resumes at half (Pulsar's maxPendingPublishRequestsPerConnection)
    max_pending_publish_requests_per_connection: int = 1_000
    # ... bytes of requests being handled, Pulsar SENDs and Kafka requests alike
    max_pending_publish_bytes_per_connection: int = 64 * MiB
    # an HTTP connection that sends no complete request header this long after it opened or
    # after its last answer is closed (bounds slowloris and idle keep-alive connections)
    http_idle_timeout_ms: int = 30_000
    # Pulsar's caps on unacknowledged messages of Shared / Key_Shared subscriptions (0: none)
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    # a subscription whose next entry is damaged skips it (counted, logged) instead of
    # stopping there (Pulsar's autoSkipNonRecoverableData); off: it waits at the damage
    auto_skip_non_recoverable_data: bool = False
    # partitions of one partitioned topic, over REST and Kafka CreateTopics (Pulsar's
    # maxNumPartitionsPerPartitionedTopic; 0: no cap)
    max_num_partitions_per_partitioned_topic: int = 1024
    # topics of one namespace, each partition counted, auto-created ones included (Pulsar's
    # maxTopicsPerNamespace; 0: no cap)
    max_topics_per_namespace: int = 10_000
    fetch_max_bytes: int = 50 * MiB  # largest Kafka fetch response (Kafka's fetch.max.bytes)
    allow_auto_topic_creation: bool = True  # a producer or consumer of an unknown topic creates it
    retention_check_interval: float = 30.0  # seconds between retention / TTL sweeps
    tier_url: str = ""  # object store for offloaded segments; default file://DATA_DIR/tier
    offload_check_interval: float = 5.0  # seconds between offload-policy sweeps
    offload_row_group_rows: int = 100_000
    offload_deletion_lag_ms: int = 4 * 3600 * 1000  # when a namespace sets none (Pulsar: 4 h)
    # offloaded segments registered as Iceberg tables (docs/iceberg.md): sqlite (embedded,
    # DATA_DIR/iceberg.db), rest (an Iceberg REST catalog at iceberg_catalog_url) or none
    iceberg_catalog: str = "sqlite"
    iceberg_catalog_url: str = ""  # sqlite: an SQLAlchemy URL (sqlite:///PATH); rest: its URI
    # table maintenance (namespace policy icebergMaintenance): snapshots older than this are
    # expired, except the newest iceberg_min_snapshots
    iceberg_snapshot_max_age_ms: int = 3_600_000
    iceberg_min_snapshots: int = 10
    spark_master: str = "local[*]"  # Spark for views; started on the first view, not at boot
    spark_driver_memory: str = "2g"
    # most events per micro-batch of a SQL view (a Python view folds a tenth, at most 100k, in
    # the server's memory); large, as each batch has a fixed cost (~0.3 s: planning, checkpoint)
    views_max_batch_events: int = 5_000_000
    views_trigger_ms: int = 100  # micro-batch interval of a view's query; 0 = back to back
    # directories Python views (module:function) may be imported from, ':'-separated (a
    # TOML list too); empty: Python views are refused
    views_python_path: str = ""
    # cluster storage (docs/cluster-protocol.md): storage nodes and the ledgers brokers write
    storage_port: int = 3181  # a storage node's port (BookKeeper's bookie port)
    storage_min_free_bytes: int = 256 * MiB  # a storage node turns read-only below this
    ensemble_size: int = 2  # E: nodes a ledger is striped over (namespace `persistence`)
    write_quorum: int = 2  # Qw: copies of each entry
    ack_quorum: int = 2  # Qa: copies on disk before a publish is acknowledged
    add_timeout_ms: int = 5_000  # a storage node slower than this is replaced in the ensemble
    rereplication_grace_s: float = 30.0  # a node gone this long has its ledgers copied elsewhere
    # load shedding (magnetar.broker.shedding): the leader broker moves bundles off overloaded
    # brokers (Pulsar's loadBalancerShedding* settings)
    load_balancer_shedding_enabled: bool = True
    load_balancer_shedding_interval_s: float = 60.0
    load_balancer_shedding_grace_s: float = 1800.0  # a shed bundle stays put this long

    @property
    def journal_path(self) -> Path:
        return self.journal_dir or self.data_dir / "journal"

    @property
    def ledger_path(self) -> Path:
        return self.ledger_dir or self.data_dir / "ledgers"

    @property
    def tier(self) -> str:
        return self.tier_url or f"file://{(self.data_dir / 'tier').resolve()}"

    @property
    def iceberg_url(self) -> str:
        """The catalog's URL: the setting, or the embedded SQLite file for ``sqlite``."""
        if self.iceberg_catalog_url or self.iceberg_catalog != "sqlite":
            return self.iceberg_catalog_url
        return f"sqlite:///{(self.data_dir / 'iceberg.db').resolve()}"

    @property
    def views_python_dirs(self) -> tuple[Path, ...]:
        """The directories of ``views_python_path``, resolved (symbolic links followed)."""
        return tuple(Path(d).resolve() for d in self.views_python_path.split(os.pathsep) if d)

    def peer_tls_context(self) -> ssl.SSLContext:
        """The context of this node's TLS connections to other brokers and storage nodes."""
        trust = self.broker_client_trust_certs_file or self.tls_trust_certs_file
        if self.broker_client_certificate_file:
            chain = (Path(self.broker_client_certificate_file), Path(self.broker_client_key_file))
        elif self.tls_enabled and self.tls_certificate_file:
            chain = (Path(self.tls_certificate_file), Path(self.tls_key_file))
        else:
            chain = None
        return client_context(Path(trust) if trust else None, chain)

    @property
    def tls_files(self) -> TlsFiles | None:
        """The TLS files when the TLS listeners are on, else None."""
        if not self.tls_enabled:
            return None
        trust = Path(self.tls_trust_certs_file) if self.tls_trust_certs_file else None
        return TlsFiles(
            Path(self.tls_certificate_file),
            Path(self.tls_key_file),
            trust,
            self.tls_require_trusted_client_cert,
        )

    def authenticator(self) -> Authenticator | None:
        """The node's authenticator when authentication is on (reads the key files: a
        ConfigError names the setting that is wrong), else None."""
        if not self.authentication_enabled:
            return None
        # PyJWT and cryptography load only on nodes that authenticate
        from magnetar.core.authentication import build_authenticator

        return build_authenticator(
            self.authentication_providers,
            token_secret_key=self.token_secret_key,
            token_public_key=self.token_public_key,
            token_auth_claim=self.token_auth_claim,
            basic_auth_conf=self.basic_auth_conf,
        )

    @property
    def metadata(self) -> str:
        return self.metadata_url or f"sqlite:///{self.data_dir / 'metadata.db'}"

    def replace(self, **changes: Any) -> Settings:
        return build_settings(overrides={**as_dict(self), **changes})


def as_dict(settings: Settings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_NON_NEGATIVE = {
    "rereplication_grace_s",
    "load_balancer_shedding_grace_s",
    "max_unacked_messages_per_consumer",
    "max_unacked_messages_per_subscription",
    "max_num_partitions_per_partitioned_topic",
    "max_topics_per_namespace",
    "segment_max_age",
    "segment_max_entries",
    "offload_deletion_lag_ms",
    "iceberg_snapshot_max_age_ms",
    "views_trigger_ms",
    "max_connections",
    "max_connections_per_ip",
    "connections_max_idle_ms",
}
_POSITIVE = {
    "storage_min_free_bytes",
    "load_balancer_shedding_interval_s",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
    "add_timeout_ms",
    "journal_max_bytes",
    "segment_max_bytes",
    "index_interval_bytes",
    "tail_cache_bytes",
    "max_open_segment_files",
    "max_message_size",
    "fetch_max_bytes",
    "group_min_session_timeout_ms",
    "group_max_session_timeout_ms",
    "group_consumer_heartbeat_interval_ms",
    "group_consumer_session_timeout_ms",
    "retention_check_interval",
    "authentication_refresh_check_seconds",
    "offload_check_interval",
    "offload_row_group_rows",
    "iceberg_min_snapshots",
    "views_max_batch_events",
    "handshake_timeout_ms",
    "keep_alive_interval_seconds",
    "max_pending_publish_requests_per_connection",
    "max_pending_publish_bytes_per_connection",
    "http_idle_timeout_ms",
}
_STRATEGIES = {
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
}
_PORTS = {
    "pulsar_port",
    "http_port",
    "kafka_port",
    "flight_port",
    "storage_port",
    "pulsar_tls_port",
    "https_port",
    "kafka_ssl_port",
}


def build_settings(
    *,
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    pulsar_conf: str | os.PathLike[str] | None = None,
) -> Settings:
    """Merge the sources and validate: a Pulsar broker.conf (``pulsar_conf``), the TOML
    file, the environment, the flags, each over the one before. Raises ConfigError naming
    the bad setting."""
    raw: dict[str, Any] = {}
    if pulsar_conf is not None:
        raw.update(read_pulsar_conf(Path(pulsar_conf))[0])
    if config_file is not None:
        raw.update(translate(_read_toml(Path(config_file)))[0])
    raw.update(_from_env(os.environ if env is None else env))
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    values = {name: _coerce(name, value) for name, value in raw.items()}
    settings = Settings(**values)
    _validate(settings)
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("config", f"file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("config", f"{path} is not valid TOML: {e}") from None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        # Accept both flat keys and one level of tables ([storage] segment_max_bytes = ...).
        if isinstance(value, dict):
            flat.update({k.replace("-", "_"): v for k, v in value.items()})
        else:
            flat[key.replace("-", "_")] = value
    return flat


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    found = {}
    for key, value in env.items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name in _FIELDS:
                found[name] = value
    return found


def _coerce(name: str, value: Any) -> Any:
    if name not in _FIELDS:
        raise ConfigError(name, "unknown setting")
    if name == "fsync":
        return value if isinstance(value, FsyncPolicy) else FsyncPolicy.parse(str(value))
    if name == "views_python_path" and isinstance(value, list | tuple):
        return os.pathsep.join(str(v) for v in value)
    if name in ("data_dir", "journal_dir", "ledger_dir"):
        return Path(value) if value not in ("", None) else None
    default = _FIELDS[name].default
    try:
        if isinstance(default, bool):
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
        if isinstance(default, int):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if isinstance(default, float):
            return float(value)
    except (TypeError, ValueError):
        raise ConfigError(name, f"expected a number, got {value!r}") from None
    return str(value)


def _validate_iceberg(s: Settings) -> None:
    if s.iceberg_catalog not in ("sqlite", "rest", "none"):
        raise ConfigError(
            "iceberg_catalog", f"{s.iceberg_catalog!r} is not one of sqlite, rest, none"
        )
    if s.iceberg_catalog == "rest" and not s.iceberg_catalog_url.startswith(
        ("http://", "https://")
    ):
        raise ConfigError(
            "iceberg_catalog_url",
            "the REST catalog needs its URI (http://HOST:PORT/...) in iceberg_catalog_url",
        )
    if (
        s.iceberg_catalog == "sqlite"
        and s.iceberg_catalog_url
        and not (s.iceberg_catalog_url.startswith("sqlite:///"))
    ):
        raise ConfigError(
            "iceberg_catalog_url",
            f"{s.iceberg_catalog_url!r}: the sqlite catalog takes sqlite:///PATH (or nothing: "
            "DATA_DIR/iceberg.db)",
        )


def _validate(s: Settings) -> None:
    if s.data_dir is None:
        raise ConfigError("data_dir", "must be set")
    for name in _POSITIVE:
        if getattr(s, name) <= 0:
            raise ConfigError(name, f"must be > 0, got {getattr(s, name)}")
    for name in _NON_NEGATIVE:
        if getattr(s, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(s, name)}")
    for name in _PORTS:
        port = getattr(s, name)
        if not 0 <= port <= 65535:
            raise ConfigError(name, f"must be a TCP port (0-65535), got {port}")
    if s.schema_compatibility_strategy not in _STRATEGIES:
        raise ConfigError(
            "schema_compatibility_strategy",
            f"unknown strategy {s.schema_compatibility_strategy!r}: use one of "
            + ", ".join(sorted(_STRATEGIES)),
        )
    if s.kafka_namespace.count("/") != 1 or not all(s.kafka_namespace.split("/")):
        raise ConfigError(
            "kafka_namespace", f"expected tenant/namespace, got {s.kafka_namespace!r}"
        )
    if s.group_min_session_timeout_ms > s.group_max_session_timeout_ms:
        raise ConfigError(
            "group_min_session_timeout_ms",
            f"{s.group_min_session_timeout_ms} is above group_max_session_timeout_ms "
            f"({s.group_max_session_timeout_ms}): lower it or raise the maximum",
        )
    parse_listeners(s.advertised_listeners)  # raises ConfigError when malformed
    _validate_iceberg(s)
    _validate_tls(s)
    check_quorums(s.ensemble_size, s.write_quorum, s.ack_quorum)
    if not (s.metadata_url == "" or s.metadata_url.startswith(("sqlite://", "memory:", "zk://"))):
        raise ConfigError(
            "metadata_url",
            f"unsupported store {s.metadata_url!r}: use sqlite:///PATH or "
            "zk://HOST:PORT[,HOST:PORT]/CHROOT",
        )


def _validate_tls(s: Settings) -> None:
    if bool(s.broker_client_certificate_file) != bool(s.broker_client_key_file):
        raise ConfigError(
            "broker_client_certificate_file",
            "set broker_client_certificate_file and broker_client_key_file together",
        )
    if not s.tls_enabled:
        return
    for name in ("tls_certificate_file", "tls_key_file"):
        if not getattr(s, name):
            raise ConfigError(name, "tls_enabled needs a PEM file here")
    if s.tls_require_trusted_client_cert and not s.tls_trust_certs_file:
        raise ConfigError(
            "tls_trust_certs_file",
            "tls_require_trusted_client_cert needs the CA certificates clients are checked against",
        )


def check_quorums(ensemble: int, write: int, ack: int) -> None:
    """Raise ConfigError unless E >= Qw >= Qa >= 1 (BookKeeper's rule)."""
    if not ensemble >= write >= ack >= 1:
        raise ConfigError(
            "ensemble_size",
            f"need ensemble >= write quorum >= ack quorum >= 1, got {ensemble}/{write}/{ack}",
        )


def parse_listeners(text: str) -> dict[str, dict[str, str]]:
    """``advertised_listeners`` as listener name → {scheme: URL}, e.g.
    ``{"external": {"pulsar": "pulsar://h:6650"}}``; a name may carry one ``pulsar://`` and
    one ``pulsar+ssl://`` URL. Raises ConfigError naming the bad entry."""
    listeners: dict[str, dict[str, str]] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, _, url = entry.partition(":")
        scheme, sep, address = url.partition("://")
        host, colon, port = address.rpartition(":")
        valid = name and sep and scheme in ("pulsar", "pulsar+ssl") and host and port.isdigit()
        if not valid or not colon:
            raise ConfigError(
                "advertised_listeners",
                f"bad entry {entry!r}: use NAME:pulsar://HOST:PORT (or NAME:pulsar+ssl://...), "
                "comma-separated",
            )
        if scheme in listeners.setdefault(name, {}):
            raise ConfigError("advertised_listeners", f"listener {name!r} has two {scheme} URLs")
        listeners[name][scheme] = url
    return listeners


def check_writable(setting: str, path: Path) -> None:
    """Create ``path`` if needed and prove it writable, or raise ConfigError naming ``setting``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".magnetar-write-probe"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            setting, f"directory {str(path)!r} is not writable: {e.strerror}"
        ) from None
