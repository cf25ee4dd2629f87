"""``magnetar cluster up|down|status``: a cluster on this machine in one command.

``up`` starts ZooKeeper (Debian's package, installed with apt-get when missing and we are
root), the storage nodes and the broker as background processes under DATA_DIR, waits for
each to say it is ready, prints the URLs and records the processes in DATA_DIR/cluster.json;
``down`` stops them (SIGTERM, then SIGKILL after a grace period). Logs: DATA_DIR/logs/.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from magnetar.cluster.zookeeper_server import JAR, ZooKeeperProcess, free_port
from magnetar.core.errors import MagnetarError

READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 30.0


class ClusterCommandError(MagnetarError):
    code = "cli.cluster"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


def add_cluster(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="start or stop a cluster on this machine")
    actions = cluster.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up",
        help="start ZooKeeper, storage nodes and brokers under DATA_DIR",
        description="Start a cluster on this machine: ZooKeeper, N storage nodes and a broker "
        "(ports default to Pulsar's, Kafka's and BookKeeper's: 2181, 3181+, 6650, 8080, 9092).",
    )
    up.add_argument("--data-dir", required=True, help="where every process keeps its data")
    up.add_argument("--storage-nodes", type=int, default=3, help="how many (default 3)")
    up.add_argument("--brokers", type=int, default=1, help="how many (broker i: every port + i)")
    up.add_argument("--zookeeper-port", type=int, default=2181)
    up.add_argument("--storage-port", type=int, default=3181, help="first node's port")
    up.add_argument("--pulsar-port", type=int, default=6650)
    up.add_argument("--http-port", type=int, default=8080)
    up.add_argument("--kafka-port", type=int, default=9092)
    up.add_argument(
        "--flight-port", type=int, default=8815, help="the broker's; storage node i: +1+i"
    )
    up.add_argument("--ensemble-size", type=int, default=2)
    up.add_argument("--write-quorum", type=int, default=2)
    up.add_argument("--ack-quorum", type=int, default=2)
    up.set_defaults(handler=_up)
    down = actions.add_parser("down", help="stop the cluster started under DATA_DIR")
    down.add_argument("--data-dir", required=True)
    down.set_defaults(handler=_down)
    status = actions.add_parser("status", help="which of the cluster's processes run")
    status.add_argument("--data-dir", required=True)
    status.set_defaults(handler=_status)


def _state_file(data_dir: Path) -> Path:
    return data_dir / "cluster.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def _ensure_zookeeper() -> None:
    if JAR.exists():
        return
    if os.geteuid() != 0:
        raise ClusterCommandError(
            "ZooKeeper is not installed: run `sudo apt-get install zookeeper` and try again"
        )
    print("installing Debian's zookeeper package (apt-get)...", flush=True)
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "zookeeper"]):
        done = subprocess.run(
            cmd, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True
        )
        if done.returncode != 0:
            raise ClusterCommandError(f"{' '.join(cmd)} failed: {done.stderr.decode()[-500:]}")


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this command; Ctrl-C here does not reach it
        )


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, line: str) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        for got in text.splitlines():
            if got.startswith(line):
                return got
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    raise ClusterCommandError(f"{line!r} never came (see {log}):\n{tail}")


def _up(args: argparse.Namespace) -> int:
    data = Path(args.data_dir).resolve()
    if args.brokers < 1 or args.storage_nodes < args.ensemble_size:
        raise ClusterCommandError(
            f"need at least one broker and at least --ensemble-size ({args.ensemble_size}) "
            f"storage nodes, got {args.brokers} broker(s), {args.storage_nodes} node(s)"
        )
    if _state_file(data).exists() and any(
        _alive(p["pid"]) for p in _processes(json.loads(_state_file(data).read_text()))
    ):
        raise ClusterCommandError(
            f"a cluster already runs under {data}: `magnetar cluster down --data-dir {data}`"
        )
    _ensure_zookeeper()
    data.mkdir(parents=True, exist_ok=True)
    logs = data / "logs"
    state: dict[str, Any] = {"nodes": [], "brokers": []}
    try:
        zk_port = args.zookeeper_port or free_port()
        zk = ZooKeeperProcess(data / "zookeeper", port=zk_port, detach=True).start()
        assert zk.proc is not None
        url = f"zk://127.0.0.1:{zk_port}/magnetar"
        state["zookeeper"] = {"pid": zk.proc.pid, "url": url}
        print(f"zookeeper   {url} (pid {zk.proc.pid})", flush=True)
        for i in range(args.storage_nodes):
            port = args.storage_port + i
            log = logs / f"storage-node-{i}.log"
            proc = _spawn(
                [
                    "storage-node",
                    "--data-dir",
                    str(data / f"storage-node-{i}"),
                    "--port",
                    str(port),
                    "--flight-port",
                    str(args.flight_port + args.brokers + i),
                    "--metadata-url",
                    url,
                ],
                log,
            )
            state["nodes"].append({"pid": proc.pid, "port": port})
            _wait_ready(proc, log, "magnetar storage-node ready")
            print(f"storage node 127.0.0.1:{port} (pid {proc.pid}, log {log})", flush=True)
        urls = []
        for b in range(args.brokers):
            log = logs / f"broker-{b}.log"
            proc = _spawn(
                [
                    "broker",
                    "--data-dir",
                    str(data / f"broker-{b}"),
                    "--metadata-url",
                    url,
                    "--pulsar-port",
                    str(args.pulsar_port + b),
                    "--http-port",
                    str(args.http_port + b),
                    "--kafka-port",
                    str(args.kafka_port + b),
                    "--flight-port",
                    str(args.flight_port + b),
                    "--ensemble-size",
                    str(args.ensemble_size),
                    "--write-quorum",
                    str(args.write_quorum),
                    "--ack-quorum",
                    str(args.ack_quorum),
                ],
                log,
            )
            state["brokers"].append({"pid": proc.pid})
            _wait_ready(proc, log, "magnetar broker ready")
            urls.append(b)
            print(
                f"broker      pulsar://127.0.0.1:{args.pulsar_port + b}  "
                f"kafka 127.0.0.1:{args.kafka_port + b}  http://127.0.0.1:{args.http_port + b} "
                f"(pid {proc.pid}, log {log})",
                flush=True,
            )
    except BaseException:
        _stop(state)
        raise
    finally:
        _state_file(data).write_text(json.dumps(state, indent=2))
    pulsar = ",".join(f"127.0.0.1:{args.pulsar_port + b}" for b in urls)
    kafka = ",".join(f"127.0.0.1:{args.kafka_port + b}" for b in urls)
    print(f"service URL pulsar://{pulsar}  bootstrap servers {kafka}", flush=True)
    print(f"stop it with: magnetar cluster down --data-dir {data}", flush=True)
    return 0


def _processes(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Brokers first, ZooKeeper last: the order to stop them in."""
    zk = [state["zookeeper"]] if "zookeeper" in state else []
    return [*state.get("brokers", []), *state.get("nodes", []), *zk]


def _stop(state: dict[str, Any]) -> list[int]:
    stopped = []
    for group in (state.get("brokers", []), state.get("nodes", []), [state.get("zookeeper")]):
        pids = [p["pid"] for p in group if p and _alive(p["pid"])]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        stopped += pids
    return stopped


def _down(args: argparse.Namespace) -> int:
    data = Path(args.data_dir).resolve()
    path = _state_file(data)
    if not path.exists():
        raise ClusterCommandError(f"no cluster was started under {data} (no {path})")
    stopped = _stop(json.loads(path.read_text()))
    path.unlink()
    print(f"stopped {len(stopped)} process(es)")
    return 0


def _status(args: argparse.Namespace) -> int:
    data = Path(args.data_dir).resolve()
    path = _state_file(data)
    if not path.exists():
        raise ClusterCommandError(f"no cluster was started under {data} (no {path})")
    state = json.loads(path.read_text())
    for kind, group in (("broker", state["brokers"]), ("storage-node", state["nodes"])):
        for p in group:
            print(f"{kind:12} pid {p['pid']:>7}  {'running' if _alive(p['pid']) else 'stopped'}")
    zk = state.get("zookeeper")
    if zk:
        print(
            f"{'zookeeper':12} pid {zk['pid']:>7}  {'running' if _alive(zk['pid']) else 'stopped'}"
        )
    return 0
