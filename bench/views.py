"""Views benchmark: bootstrap a group-by view over N historical events (mostly offloaded to
the object store), then measure live publish → visible-in-store latency; in the same run the
baseline: consume the same history through pulsar-client and fold it in Python.

* **bootstrap** — ``PUT /views/bench`` with ``SELECT key AS user, count(*) AS n FROM events
  GROUP BY key`` (one Spark structured streaming query from the earliest offset); the clock
  runs from the PUT (Spark already started by a warm-up view on another topic) until the
  view is LIVE with every historical event applied. events/s = N / that time. Then the
  same view once more under another name: the first run pays for the JVM compiling the
  read and aggregation paths (the warm-up view's few events do not), the second does not.
* **live** — one event at a time (synchronous send), then poll ``GET /views/bench/rows``
  until its count moved: publish → visible in the store, ``--samples`` times.
* **baseline** — an exclusive pulsar-client consumer from the earliest message, folding
  count-per-key in a Python dict, acknowledging cumulatively.
* **floor** — pyarrow alone, in this process: read the key column of the offloaded Parquet
  objects and ``group_by(key).count``; no Spark, no exactly-once, no store, no live tail —
  what the raw files allow on one core.

Run: ``PYTHONPATH=. .venv/bin/python bench/views.py [--events N] [--users U]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import (
    RESULTS_DIR,
    fmt_ms,
    fmt_rate,
    machine_info,
    make_workdir,
    percentile,
    render_markdown_table,
    utc_now,
    write_json,
)
from magnetar.cli.rest import RestClient
from magnetar.testing.server import StandaloneProcess

TOPIC = "bench-history"
SQL = "SELECT key AS user, count(*) AS n FROM events GROUP BY key"


def publish_history(client: Any, n: int, users: int) -> float:
    producer = client.create_producer(
        TOPIC,
        batching_enabled=True,
        batching_max_messages=2000,
        max_pending_messages=0,
        block_if_queue_full=True,
        batching_max_publish_delay_ms=5,
    )
    payload = b'{"amount": 1}'
    start = time.perf_counter()
    for i in range(n):
        producer.send_async(payload, None, partition_key=f"user{i % users}")
    producer.flush()
    producer.close()
    return time.perf_counter() - start


def offload(rest: RestClient, timeout: float = 600) -> dict[str, int]:
    rest.call("PUT", f"/admin/v2/persistent/public/default/{TOPIC}/offload")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = rest.call("GET", f"/admin/v2/persistent/public/default/{TOPIC}/offload")
        if status["status"] in ("SUCCESS", "ERROR"):
            break
        time.sleep(0.5)
    plan = rest.call("GET", f"/magnetar/v1/topics/public/default/{TOPIC}/plan")
    segs = plan["partitions"][0]["segments"]
    remote = sum(s["end"] - s["first"] for s in segs if s["object"] and not s["local"])
    return {"offloaded": remote, "total": plan["partitions"][0]["end"]}


def wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def bootstrap(rest: RestClient, name: str, n: int) -> float:
    start = time.perf_counter()
    rest.call("PUT", f"/views/{name}", {"source": TOPIC, "sql": SQL, "key": "user"})

    def done() -> bool:
        s = rest.call("GET", f"/views/{name}")
        if s["state"] == "FAILED":
            raise SystemExit(f"view failed: {s['error']}")
        return bool(
            s["state"] == "LIVE" and s["offsets"][f"persistent://public/default/{TOPIC}"]["0"] >= n
        )

    wait(done, 3600, f"the bootstrap of {name}")
    return time.perf_counter() - start


def live_latencies(client: Any, rest: RestClient, samples: int) -> list[float]:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    out = []
    for i in range(samples):

        def count() -> int:
            rows = rest.call("GET", "/views/bench/rows?user=probe")["rows"]
            return int(rows[0]["n"]) if rows else 0

        before = count()
        start = time.perf_counter()
        producer.send(b'{"amount": 1}', partition_key="probe")
        wait(lambda b=before: count() > b, 60, f"live sample {i}")
        out.append(time.perf_counter() - start)
    producer.close()
    return out


def baseline(url: str, n: int) -> float:
    client = pulsar.Client(url)
    consumer = client.subscribe(
        TOPIC,
        "bench-baseline",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=10_000,
    )
    counts: dict[str, int] = {}
    start = time.perf_counter()
    for i in range(n):
        msg = consumer.receive()
        key = msg.partition_key()
        counts[key] = counts.get(key, 0) + 1
        if i % 10_000 == 9_999:
            consumer.acknowledge_cumulative(msg)
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


def pyarrow_floor(rest: RestClient) -> tuple[float, int]:
    """Seconds for pyarrow to count per key over the offloaded objects, and their rows."""
    plan = rest.call("GET", f"/magnetar/v1/topics/public/default/{TOPIC}/plan")
    root = Path(plan["store"].removeprefix("file://"))
    keys = [s["object"] for s in plan["partitions"][0]["segments"] if s["object"]]
    start = time.perf_counter()
    tables = [pq.read_table(root / k, columns=["key"]) for k in keys]
    table = pa.concat_tables(tables)
    table.group_by("key").aggregate([("key", "count")])
    return time.perf_counter() - start, table.num_rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir, _fs = make_workdir(args.dir, "magnetar-bench-views-")
    extra = ["--spark-master", "local[*]", "--offload-deletion-lag-ms", "0"]
    # Small segments: all but the open one get offloaded ("mostly offloaded", as specified).
    extra += ["--segment-max-bytes", str(args.segment_mb * 1024 * 1024)]
    extra += ["--offload-check-interval", "1"]
    extra += ["--spark-driver-memory", "4g"]
    with StandaloneProcess(workdir / "node", extra_args=extra) as server:
        client = pulsar.Client(server.pulsar_url)
        rest = RestClient(server.http_url, timeout=600)
        publish_s = publish_history(client, args.events, args.users)
        placement = offload(rest)
        warm = client.create_producer("bench-warmup")
        warm.send(b"{}")
        rest.call("PUT", "/views/warmup", {"source": "bench-warmup", "sql": SQL, "key": "user"})
        wait(lambda: rest.call("GET", "/views/warmup")["state"] == "LIVE", 600, "warm-up view")
        boot_s = bootstrap(rest, "bench", args.events)
        last_batch = rest.call("GET", "/views/bench")["lastBatchMs"]
        # The same view again: the JVM has now compiled this query's hot paths once.
        again_s = bootstrap(rest, "again", args.events)
        rest.call("DELETE", "/views/again")
        lat = live_latencies(client, rest, args.samples)
        client.close()
        base_s = baseline(server.pulsar_url, args.events)
        floor_s, floor_rows = pyarrow_floor(rest)
    return {
        "events": args.events,
        "users": args.users,
        "publish_s": publish_s,
        **placement,
        "bootstrap_s": boot_s,
        "bootstrap_eps": args.events / boot_s,
        "again_s": again_s,
        "again_eps": args.events / again_s,
        "live_p50_s": percentile(lat, 50),
        "live_p99_s": percentile(lat, 99),
        "live_samples": lat,
        "baseline_s": base_s,
        "baseline_eps": args.events / base_s,
        "floor_s": floor_s,
        "floor_rows": floor_rows,
        "floor_eps": floor_rows / floor_s,
        "last_batch_ms": last_batch,
    }


def report(r: dict[str, Any]) -> str:
    headers = ["", "events", "offloaded", "time s", "events/s", "live p50 ms", "live p99 ms"]
    rows = [
        [
            "view, first after start (Spark, one streaming query)",
            f"{r['events']:,}",
            f"{r['offloaded']:,}",
            f"{r['bootstrap_s']:.1f}",
            fmt_rate(r["bootstrap_eps"]),
            fmt_ms(r["live_p50_s"]),
            fmt_ms(r["live_p99_s"]),
        ],
        [
            "same view again (warm JVM)",
            f"{r['events']:,}",
            f"{r['offloaded']:,}",
            f"{r['again_s']:.1f}",
            fmt_rate(r["again_eps"]),
            "-",
            "-",
        ],
        [
            "floor: pyarrow group_by over the offloaded Parquet",
            f"{r['floor_rows']:,}",
            f"{r['floor_rows']:,}",
            f"{r['floor_s']:.1f}",
            fmt_rate(r["floor_eps"]),
            "-",
            "-",
        ],
        [
            "baseline: pulsar-client + Python fold",
            f"{r['events']:,}",
            "-",
            f"{r['baseline_s']:.1f}",
            fmt_rate(r["baseline_eps"]),
            "-",
            "-",
        ],
    ]
    return render_markdown_table(headers, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--segment-mb", type=int, default=4, help="segment size in MiB")
    args = parser.parse_args()
    result = run(args)
    print(report(result))
    write_json(RESULTS_DIR / "views.json", {"when": utc_now(), "machine": machine_info(), **result})


if __name__ == "__main__":
    main()
