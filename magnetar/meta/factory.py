"""Open a :class:`MetadataStore` from its URL (the ``metadata_url`` setting)."""

from __future__ import annotations

from pathlib import Path

from magnetar.core.errors import ConfigError
from magnetar.meta.base import MetadataStore
from magnetar.meta.errors import MetadataError
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.meta.sqlite import SqliteMetadataStore

SQLITE_SCHEME = "sqlite:///"
MEMORY_URL = "memory:"
ZOOKEEPER_SCHEME = "zk://"
_USAGE = (
    "use sqlite:///relative/path.db, sqlite:////absolute/path.db (SQLAlchemy's convention: "
    "the path is everything after 'sqlite:///'), zk://host:2181[,host2:2181]/chroot for "
    "ZooKeeper, or memory: for tests"
)


def open_store(url: str) -> MetadataStore:
    """Open the store ``url`` names; blocks until it is ready, so call it at startup.

    - ``sqlite:///data/meta.db`` (relative) or ``sqlite:////var/lib/magnetar/meta.db``
      (absolute): a :class:`SqliteMetadataStore`; missing parent directories are created.
    - ``zk://host:2181[,host2:2181]/chroot[?sessionTimeoutMs=N]``: a ZooKeeperMetadataStore
      (needs ``kazoo``); a broker's topics move this long after it dies (default 10 s).
    - ``memory:``: a :class:`MemoryMetadataStore`, empty and gone with the process.

    Raises ConfigError for any other URL, MetadataError if the file cannot be opened.
    """
    if url == MEMORY_URL:
        return MemoryMetadataStore()
    if url.startswith(SQLITE_SCHEME):
        return _open_sqlite(url, Path(url.removeprefix(SQLITE_SCHEME)))
    if url.startswith(ZOOKEEPER_SCHEME):
        return _open_zookeeper(url)
    raise ConfigError("metadata_url", f"unsupported URL {url!r}; {_USAGE}")


def _open_zookeeper(url: str) -> MetadataStore:
    try:
        from magnetar.meta.zookeeper import ZooKeeperMetadataStore
    except ImportError as e:  # kazoo is an optional dependency
        raise ConfigError(
            "metadata_url", f"{url!r} needs the kazoo package: pip install 'magnetar[cluster]'"
        ) from e
    base, _, query = url.partition("?")
    options = dict(part.partition("=")[::2] for part in query.split("&") if part)
    unknown = set(options) - {"sessionTimeoutMs"}
    if unknown:
        raise ConfigError("metadata_url", f"unknown option(s) {sorted(unknown)} in {url!r}")
    if "sessionTimeoutMs" in options:
        raw = options["sessionTimeoutMs"]
        if not raw.isdigit() or int(raw) < 1000:
            raise ConfigError("metadata_url", f"sessionTimeoutMs must be >= 1000, got {raw!r}")
        return ZooKeeperMetadataStore(base, session_timeout=int(raw) / 1000)
    return ZooKeeperMetadataStore(base)


def _open_sqlite(url: str, path: Path) -> SqliteMetadataStore:
    if str(path) in ("", ".", ":memory:") or url.endswith("/"):
        raise ConfigError("metadata_url", f"{url!r} names no database file; {_USAGE}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MetadataError(
            f"cannot create the directory of metadata store {path}: {e}; "
            "check the path and its permissions"
        ) from e
    return SqliteMetadataStore(path)
