"""Object stores over ``pyarrow.fs``: a local directory (the default) and S3.

Calls block: run them on a worker thread, never on the event loop. Keys are relative
``/``-separated paths. ``put`` is atomic for readers: they see the whole object or none.
A key that would resolve outside the store's root (an empty, ``.`` or ``..`` part, a leading
``/``, a backslash, a control character; on a local disk also a symbolic link that leads
out) is refused with UnsafeKeyError before anything is read or written.
"""

from __future__ import annotations

import os
import urllib.parse
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from magnetar.core.errors import ConfigError
from magnetar.tier.errors import ObjectNotFoundError, ObjectStoreUnavailableError, UnsafeKeyError

TMP_MARK = ".tmp-"  # what marks the temporary key an upload writes before moving it in place


class ObjectStore:
    """Blocking key → bytes store. Subclasses only choose the filesystem."""

    def __init__(self, fs: pafs.FileSystem, url: str) -> None:
        self.fs = fs
        self.url = url

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key``; durable and visible in full when this returns.

        The bytes go to a temporary key (``<key>.tmp-<pid>-<random>``) first, then are moved
        into place. A failure or crash can leave such a temporary object behind, never a
        partial ``key``. An offload writes under its attempt's prefix, so the leftover goes
        with the attempt (``Offloader.delete_attempt``, called for recorded attempts only).
        """
        key = self.checked(key)
        tmp = f"{key}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            self._mkdirs(key)
            self._write(tmp, data)
            self._publish(tmp, key)
        except OSError as e:
            self._discard(tmp)
            raise ObjectStoreUnavailableError(f"cannot write {key} to {self.url}: {e}") from None

    def _write(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(key) as out:
            out.write(data)

    def _publish(self, tmp: str, key: str) -> None:
        self.fs.move(tmp, key)

    def get(self, key: str) -> bytes:
        with self.open(key) as f:
            data: bytes = f.read()
            return data

    def open(self, key: str) -> pa.NativeFile:
        """A random-access file (what pyarrow.parquet reads from)."""
        key = self.checked(key)
        try:
            return self.fs.open_input_file(key)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"no object {key} in {self.url}") from None
        except OSError as e:
            raise self._error(key, e) from None

    def size(self, key: str) -> int:
        info = self._info(key)
        return int(info.size)

    def exists(self, key: str) -> bool:
        return bool(self._info(key, missing_ok=True).type != pafs.FileType.NotFound)

    def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error."""
        key = self.checked(key)
        try:
            self.fs.delete_file(key)
        except FileNotFoundError:
            return
        except OSError as e:
            if self._info(key, missing_ok=True).type == pafs.FileType.NotFound:
                return
            raise self._error(key, e) from None

    def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (a directory-like prefix), sorted."""
        if prefix.rstrip("/"):
            self.checked(prefix.rstrip("/"))
        selector = pafs.FileSelector(prefix.rstrip("/"), recursive=True, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as e:
            raise self._error(prefix, e) from None
        return sorted(i.path for i in infos if i.type == pafs.FileType.File)

    def _info(self, key: str, *, missing_ok: bool = False) -> pafs.FileInfo:
        key = self.checked(key)
        try:
            info = self.fs.get_file_info(key)
        except OSError as e:
            raise self._error(key, e) from None
        if info.type == pafs.FileType.NotFound and not missing_ok:
            raise ObjectNotFoundError(f"no object {key} in {self.url}")
        return info

    def checked(self, key: str) -> str:
        """``key`` if it names an object under this store's root, else UnsafeKeyError."""
        parts = key.split("/")
        if (
            any(part in ("", ".", "..") for part in parts)
            or "\\" in key
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key)
        ):
            raise self._unsafe(key)
        return key

    def _unsafe(self, key: str) -> UnsafeKeyError:
        return UnsafeKeyError(
            f"refused object key {repr(key)[:120]}: a key must stay inside {self.url}, as a "
            "relative path of '/'-separated names (none empty, '.' or '..'; no backslash, no "
            "control character, no symbolic link leading out)"
        )

    def _mkdirs(self, key: str) -> None:
        parent = key.rpartition("/")[0]
        if parent:
            self.fs.create_dir(parent, recursive=True)

    def _discard(self, key: str) -> None:
        try:
            self.fs.delete_file(key)
        except OSError:
            return  # best effort: the leftover is a temp name no reader looks at

    def _error(self, key: str, e: OSError) -> Exception:
        return ObjectStoreUnavailableError(f"object store {self.url} failed on {key}: {e}")


class LocalObjectStore(ObjectStore):
    """A directory used as an object store (the embedded default, DATA_DIR/tier).

    ``put`` fsyncs the object and its directory: a local disk, unlike S3, forgets what the
    page cache held when the power goes, and an OFFLOADED segment may have no other copy.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        root = os.path.abspath(root)
        os.makedirs(root, exist_ok=True)
        super().__init__(pafs.SubTreeFileSystem(root, pafs.LocalFileSystem()), f"file://{root}")
        self.root = root

    def checked(self, key: str) -> str:
        """The base checks, then the real path (symbolic links followed) must lie under the
        root: a link planted inside the tier directory cannot lead a write out of it."""
        super().checked(key)
        real_root = os.path.realpath(self.root)
        if os.path.commonpath([real_root, os.path.realpath(self._path(key))]) != real_root:
            raise self._unsafe(key)
        return key

    def _write(self, key: str, data: bytes) -> None:
        with open(self._path(key), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())

    def _mkdirs(self, key: str) -> None:
        parts = key.split("/")[:-1]
        os.makedirs(os.path.join(self.root, *parts), exist_ok=True)
        for depth in range(len(parts)):  # each new directory's entry is durable in its parent
            _fsync_dir(os.path.join(self.root, *parts[:depth]))

    def _publish(self, tmp: str, key: str) -> None:
        os.replace(self._path(tmp), self._path(key))
        _fsync_dir(os.path.dirname(self._path(key)))

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class S3ObjectStore(ObjectStore):
    """Any S3-compatible endpoint. Credentials come from arguments or the usual AWS_*
    environment variables."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        options: dict[str, Any] = {"region": region or os.environ.get("AWS_REGION", "us-east-1")}
        if endpoint:
            parsed = urllib.parse.urlparse(endpoint)
            options["endpoint_override"] = parsed.netloc or parsed.path
            options["scheme"] = parsed.scheme or "https"
        key = access_key or os.environ.get("AWS_ACCESS_KEY_ID")
        secret = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
        if key and secret:
            options.update(access_key=key, secret_key=secret)
        s3 = pafs.S3FileSystem(**options)
        base = f"{bucket}/{prefix.strip('/')}".rstrip("/")
        super().__init__(pafs.SubTreeFileSystem(base, s3), f"s3://{base}")
        self.bucket = bucket
        self.s3 = s3
        # what another S3 client of the same store needs (the Iceberg catalog's FileIO)
        self.endpoint = endpoint or ""
        self.region = str(options["region"])
        self.access_key = key or ""
        self.secret_key = secret or ""


def open_object_store(url: str) -> ObjectStore:
    """``file:///path`` or a plain path, or ``s3://bucket/prefix?endpoint=...&region=...``."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        return LocalObjectStore(parsed.path if parsed.scheme else url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError("tier_url", f"{url!r} names no bucket: use s3://BUCKET/PREFIX")
        query = dict(urllib.parse.parse_qsl(parsed.query))
        return S3ObjectStore(
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint=query.get("endpoint"),
            region=query.get("region"),
        )
    raise ConfigError("tier_url", f"unsupported object store {url!r}: use file:///DIR or s3://...")
