"""Real PostgreSQL and Redis servers on free ports, for the state store tests.

They are installed with apt-get when missing (as root; otherwise the error says what to
install). PostgreSQL refuses to run as root, so as root it runs as ``nobody`` in a directory
that user owns. Readiness is polled with a deadline, never slept for.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.testing.server import free_port

APT_PACKAGES = ["postgresql", "redis-server"]


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def ensure_installed() -> None:
    """Install PostgreSQL and Redis through apt-get when either is missing."""
    if postgres_bin() is not None and shutil.which("redis-server"):
        return
    if os.geteuid() != 0:
        raise RuntimeError("install postgresql and redis-server (apt-get install -y ...)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", *APT_PACKAGES], check=True, env=env, capture_output=True
    )


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} was not ready within {timeout} s")
        time.sleep(0.05)


def _as_user() -> list[str]:
    return ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []


@dataclass
class PostgresServer:
    """``with PostgresServer() as pg: psycopg.connect(pg.url)`` (user postgres, trust)."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="magnetar-pg-")))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> PostgresServer:
        bindir = postgres_bin()
        assert bindir is not None, "PostgreSQL is not installed"
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody")
        self.root.chmod(0o755)
        data = self.root / "data"
        subprocess.run(
            [*_as_user(), str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
            check=True,
            capture_output=True,
        )
        args = ["-D", str(data), "-p", str(self.port), "-k", str(self.root)]
        args += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]
        with (self.root / "postgres.log").open("wb") as log:  # the child keeps its own fd
            self.proc = subprocess.Popen(
                [*_as_user(), str(bindir / "postgres"), *args], stdout=log, stderr=log
            )
        wait_until(self._accepts, 30, "postgres")
        return self

    def _accepts(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError((self.root / "postgres.log").read_text()[-2000:])
        bindir = postgres_bin()
        assert bindir is not None
        probe = [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(probe, capture_output=True).returncode == 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RedisServer:
    """``with RedisServer() as r: redis.Redis.from_url(r.url)`` (AOF, fsync always)."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="magnetar-redis-")))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root)]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        self.proc = subprocess.Popen(
            ["redis-server", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(self._accepts, 30, "redis")
        return self

    def _accepts(self) -> bool:
        import socket

        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
