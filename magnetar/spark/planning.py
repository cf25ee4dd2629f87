"""Planning reads on the driver: topics → partitions → offset ranges → input partitions.

A bounded read is a range of segments, resolved from segment metadata (seed 001): time
bounds pick segments by their publish-time range, and only segments that overlap the range
become input partitions. Offloaded segments are read from the object store by the
executors (even while a local copy lingers); the others through the storage node's Arrow
Flight endpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from magnetar.core.names import TopicName
from magnetar.spark.options import EARLIEST, ReadOptions, SparkSourceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Slice:
    """One input partition: an offset range of one partition, from one place."""

    kind: str  # "parquet" (offloaded object), "flight" (the broker), "node" (storage nodes)
    topic: str
    partition: int
    partition_path: str  # tenant/ns/topic[-partition-N]
    start: int
    end: int
    location: str  # object store URL or flight URL
    key: str = ""  # object key for parquet slices
    min_ts: int | None = None
    max_ts: int | None = None
    segment: int = -1  # "node" slices: the ledger the storage nodes hold
    replicas: tuple[str, ...] = ()  # "node" slices: Flight URLs of nodes holding the range
    grant: str = ""  # "flight" slices: the read grant the plan carried (authorization on)
    # Kafka transactions in the range: drop markers, and rows of these aborted ones
    transactions: bool = False
    aborted: tuple[tuple[int, int, int], ...] = ()  # (producer id, first, marker offset)


def _request(url: str, token: str | None, **kwargs: Any) -> urllib.request.Request:
    request = urllib.request.Request(url, **kwargs)
    if token:  # a node with authentication on (docs/security.md)
        request.add_header("Authorization", f"Bearer {token}")
    return request


def http_get(url: str, token: str | None = None) -> Any:
    try:
        with urllib.request.urlopen(_request(url, token), timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            reason = json.loads(e.read()).get("reason", e.reason)
        except ValueError:
            reason = e.reason
        raise SparkSourceError(f"{reason} (HTTP {e.code} from {url})") from None
    except urllib.error.URLError as e:
        raise SparkSourceError(
            f"cannot reach Magnetar at {url} ({e.reason}); check the url option"
        ) from None


def http_post(url: str, body: Any, token: str | None = None) -> None:
    request = _request(url, token, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30):
            return
    except urllib.error.URLError as e:
        raise SparkSourceError(f"commit to {url} failed: {e}") from None


def plan_path(topic: str) -> str:
    name = TopicName.parse(topic)
    return f"/magnetar/v1/topics/{name.path}/plan"


def resolve_topics(opts: ReadOptions) -> list[str]:
    if opts.topics:
        return [str(TopicName.parse(t)) for t in opts.topics]
    query = urllib.parse.urlencode({"pattern": opts.pattern or ""})
    found: list[str] = http_get(f"{opts.url}/magnetar/v1/topics?{query}", opts.token)
    if not found:
        raise SparkSourceError(f"no topic matches topicsPattern {opts.pattern!r}")
    return found


def fetch_plans(opts: ReadOptions) -> dict[str, dict[str, Any]]:
    """Every topic's plan (partitions, segments, locations), keyed by full topic name."""
    return {t: http_get(opts.url + plan_path(t), opts.token) for t in resolve_topics(opts)}


def bounds(
    plans: dict[str, dict[str, Any]],
    spec: str | dict[str, dict[str, int]],
    *,
    end: bool,
) -> dict[str, dict[str, int]]:
    """Offsets per topic and partition for earliest / latest / explicit JSON."""
    out: dict[str, dict[str, int]] = {}
    for topic, plan in sorted(plans.items()):
        parts: dict[str, int] = {}
        for p in plan["partitions"]:
            key = str(p["index"])
            if isinstance(spec, dict):
                given = spec.get(topic, spec.get(TopicName.parse(topic).local, {}))
                parts[key] = int(given.get(key, p["end"] if end else p["start"]))
                if parts[key] == -1:
                    parts[key] = p["end"]
                elif parts[key] == -2:
                    parts[key] = p["start"]
            else:
                parts[key] = p["start"] if spec == EARLIEST else p["end"]
        out[topic] = dict(sorted(parts.items()))
    return out


def check_data_loss(
    plans: dict[str, dict[str, Any]], start: dict[str, dict[str, int]], fail: bool
) -> dict[str, dict[str, int]]:
    """Move starts that retention already removed; fail unless failOnDataLoss=false."""
    fixed: dict[str, dict[str, int]] = {}
    for topic, parts in start.items():
        firsts = {str(p["index"]): p["start"] for p in plans[topic]["partitions"]}
        fixed[topic] = {}
        for key, offset in parts.items():
            first = firsts.get(key, 0)
            if offset < first:
                message = (
                    f"{topic} partition {key}: offsets {offset}..{first - 1} were removed by "
                    "retention"
                )
                if fail:
                    raise SparkSourceError(
                        message + "; set failOnDataLoss=false to continue from the earliest"
                    )
                log.warning("%s; continuing from offset %d", message, first)
                offset = first
            fixed[topic][key] = offset
    return fixed


def slices(
    plans: dict[str, dict[str, Any]],
    start: dict[str, dict[str, int]],
    end: dict[str, dict[str, int]],
    *,
    min_ts: int | None = None,
    max_ts: int | None = None,
) -> list[Slice]:
    """Input partitions covering [start, end) of every partition, one per segment piece."""
    out: list[Slice] = []
    for topic, plan in sorted(plans.items()):
        for p in plan["partitions"]:
            key = str(p["index"])
            lo, hi = start[topic].get(key, p["start"]), end[topic].get(key, p["end"])
            found = _partition_slices(plan, p, topic, lo, hi, min_ts, max_ts)
            out += [_with_transactions(s, p) for s in found] if p.get("transactions") else found
    return out


def _with_transactions(s: Slice, p: dict[str, Any]) -> Slice:
    aborted = tuple(
        (int(pid), int(first), int(last))
        for pid, first, last in p.get("aborted", [])
        if last >= s.start and first < s.end
    )
    return dataclasses.replace(s, transactions=True, aborted=aborted)


def _partition_slices(
    plan: dict[str, Any],
    p: dict[str, Any],
    topic: str,
    lo: int,
    hi: int,
    min_ts: int | None,
    max_ts: int | None,
) -> list[Slice]:
    out: list[Slice] = []
    for seg in p["segments"]:
        a, b = max(lo, seg["first"]), min(hi, seg["end"])
        if a >= b or not _overlaps(seg, min_ts, max_ts):
            continue
        # An offloaded segment is read from its object even while a local copy lingers
        # (offloadDeletionLagMs): Parquet straight into Arrow beats rebuilding rows from
        # entries on the storage node, and the local copy may be dropped mid-read.
        if seg["state"] == "OFFLOADED" and seg["object"]:
            # a slice per object; each holds its own offsets (the filter keeps [a, b))
            for key in seg.get("objects") or [seg["object"]]:
                out.append(
                    Slice(
                        "parquet",
                        topic,
                        p["index"],
                        p["name"],
                        a,
                        b,
                        p.get("store", plan["store"]),
                        key,
                        min_ts,
                        max_ts,
                    )
                )
        elif seg.get("replicas"):
            # a closed ledger on storage nodes: read each fragment straight from a node
            for frag in seg["replicas"]:
                fa, fb = max(a, frag["first"]), min(b, frag["end"])
                if fa < fb:
                    out.append(
                        Slice(
                            "node",
                            topic,
                            p["index"],
                            p["name"],
                            fa,
                            fb,
                            p.get("flight", plan["flight"]),
                            "",
                            min_ts,
                            max_ts,
                            segment=seg["id"],
                            replicas=tuple(frag["flight"]),
                        )
                    )
        elif out and out[-1].kind == "flight" and out[-1].end == a:
            prev = out.pop()  # neighbouring local segments: one Flight stream
            out.append(
                Slice(
                    "flight",
                    topic,
                    p["index"],
                    p["name"],
                    prev.start,
                    b,
                    p.get("flight", plan["flight"]),
                    "",
                    min_ts,
                    max_ts,
                )
            )
        else:
            flight = p.get("flight", plan["flight"])
            out.append(
                Slice(
                    "flight",
                    topic,
                    p["index"],
                    p["name"],
                    a,
                    b,
                    flight,
                    "",
                    min_ts,
                    max_ts,
                    grant=p.get("grant", ""),
                )
            )
    return out


def _overlaps(seg: dict[str, Any], min_ts: int | None, max_ts: int | None) -> bool:
    if seg["minTime"] is None:
        return False
    if min_ts is not None and seg["maxTime"] < min_ts:
        return False
    # Publish times need not be monotonic, but a segment's first publish time is a lower
    # bound only for its own messages: compare against the segment's maximum too.
    return not (max_ts is not None and seg["minTime"] >= max_ts and seg["maxTime"] >= max_ts)


def split(parts: list[Slice], min_partitions: int | None) -> list[Slice]:
    """Split the largest slices until there are at least ``min_partitions``."""
    parts = list(parts)
    while min_partitions and len(parts) < min_partitions:
        biggest = max(parts, key=lambda s: s.end - s.start, default=None)
        if biggest is None or biggest.end - biggest.start < 2:
            break
        mid = (biggest.start + biggest.end) // 2
        i = parts.index(biggest)
        parts[i : i + 1] = [_with(biggest, biggest.start, mid), _with(biggest, mid, biggest.end)]
    return parts


def _with(s: Slice, start: int, end: int) -> Slice:
    return dataclasses.replace(s, start=start, end=end)
