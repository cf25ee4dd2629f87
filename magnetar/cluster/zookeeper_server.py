"""A real ZooKeeper server (Debian's ``zookeeper`` package) on a free loopback port, in a
directory of its own, for tests and the local cluster launcher.

``make test`` installs the package (apt-get) when it is missing; :func:`zookeeper_jar`
says what to do if it still is. The server runs standalone (one node) with a short tick,
so sessions of a killed client expire within seconds.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


JAR = Path("/usr/share/java/zookeeper.jar")
CONF_DIR = Path("/etc/zookeeper/conf")
START_TIMEOUT_S = 30.0


def zookeeper_jar() -> Path:
    if not JAR.exists():
        raise RuntimeError(
            f"ZooKeeper is not installed ({JAR} is missing): run `make test` (it installs "
            "Debian's zookeeper package) or `apt-get install zookeeper`"
        )
    return JAR


@dataclass
class ZooKeeperProcess:
    """``with ZooKeeperProcess(tmp) as zk: open_store(zk.url("/chroot"))``."""

    directory: Path
    port: int = field(default_factory=free_port)
    tick_ms: int = 200
    listen: str = "127.0.0.1"  # 0.0.0.0 for a test that reaches it from a network namespace
    detach: bool = False  # its own session: outlives the command that started it
    proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        return f"zk://{self.hosts}{chroot}"

    def start(self) -> ZooKeeperProcess:
        jar = zookeeper_jar()
        java = shutil.which("java")
        if java is None:
            raise RuntimeError(
                "java is not on PATH: ZooKeeper needs a JRE (apt-get install default-jre-headless)"
            )
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.listen}\n"
            "admin.enableServer=false\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            "maxSessionTimeout=60000\n"
            "4lw.commands.whitelist=ruok\n"
        )
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 — the child owns it
        self.proc = subprocess.Popen(
            [
                java,
                "-Xmx256m",
                f"-Dzookeeper.log.dir={self.directory}",
                "-cp",
                f"{CONF_DIR}:{jar}",
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(config),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=self.detach,
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                break
            if self.ruok():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"ZooKeeper did not start on port {self.port}; see {self.directory / 'zookeeper.log'}"
        )

    def ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ZooKeeperProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
