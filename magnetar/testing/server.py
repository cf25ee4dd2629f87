"""Start a real ``magnetar standalone`` in a child process on free ports, for tests and
benchmarks. The child is a real server: kill it with SIGKILL to test crash recovery."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
READY = "magnetar standalone ready"


_handed_out: set[int] = set()
_random = random.Random()


def _ephemeral_low() -> int:
    """The first port the kernel gives outgoing connections (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing listens on, below the kernel's ephemeral range: an outgoing connection
    (a client anywhere on the machine) can never take it between now and a restart of the
    server on it, as it could a port the kernel handed out for ``bind(0)``. Never the same
    port twice in one process."""
    low = _ephemeral_low()
    if low > 12_000:
        for _ in range(200):
            port = _random.randrange(10_000, low)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        found: int = s.getsockname()[1]
        return found


@dataclass
class StandaloneProcess:
    """``with StandaloneProcess(data_dir) as server: pulsar.Client(server.pulsar_url)``."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    role: str = "standalone"  # or "broker" (ledgers on storage nodes; needs --metadata-url)
    module: str = "magnetar.cli"  # what ``python -m`` runs (a test's own entry point)
    pulsar_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    kafka_port: int = field(default_factory=free_port)
    flight_port: int = field(default_factory=free_port)
    startup_timeout: float = 60.0
    proc: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    @property
    def ready_line(self) -> str:
        return f"magnetar {self.role} ready"

    def pause(self) -> None:
        """SIGSTOP: the process is frozen, its sockets stay open (a zombie in waiting).
        Returns once every thread of it has stopped: the signal lands a moment after it is
        sent, and a test that changes the world next (releases a lock the process waits
        for) must not let it run meanwhile."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _all_threads_stopped(self.proc.pid):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"process {self.proc.pid} exited (code {self.proc.returncode}) before "
                    "it could be paused"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"process {self.proc.pid} did not stop after SIGSTOP")
            time.sleep(0.001)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            self.module,
            self.role,
            "--data-dir",
            str(self.data_dir),
            "--bind-address",
            "127.0.0.1",
            "--pulsar-port",
            str(self.pulsar_port),
            "--http-port",
            str(self.http_port),
            "--kafka-port",
            str(self.kafka_port),
            "--flight-port",
            str(self.flight_port),
            *self.extra_args,
        ]

    def start(self) -> StandaloneProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        ready = threading.Event()
        self.pump = threading.Thread(target=self._pump, args=(ready,), daemon=True)
        self.pump.start()
        came_up = ready.wait(self.startup_timeout) and any(
            self.ready_line in line for line in self.output
        )
        if not came_up or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError(f"{self.role} did not start:\n" + "".join(self.output[-50:]))
        return self

    def _pump(self, ready: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if self.ready_line in line:
                ready.set()
        ready.set()  # the process ended: let start() notice

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (crash test)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        code = self._reap()
        return code

    def _reap(self) -> int:
        assert self.proc is not None
        code = self.proc.wait()
        if self.pump is not None:
            # Children (Spark's JVM) may hold the pipe a little longer: let the reader see EOF
            # before closing, or it reads from a closed file.
            self.pump.join(30)
        if self.proc.stdout is not None and (self.pump is None or not self.pump.is_alive()):
            self.proc.stdout.close()
        return code

    def __enter__(self) -> StandaloneProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` in state T (stopped by a signal), per /proc; False when it
    has none left (the process is gone)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rpartition(")")[2].split()[0])
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
    return bool(states) and all(state in ("T", "t") for state in states)
