"""Which broker serves a topic: namespace bundles owned through ZooKeeper ephemeral nodes
(docs/cluster-protocol.md, "Brokers"), Pulsar's scheme.

A namespace's topics hash (CRC-32 of the topic name) into ``BUNDLES`` equal ranges; a bundle
is owned by the broker holding the ephemeral node ``/bundles/<tenant>/<ns>/<range>``, which
goes with its ZooKeeper session. A lookup finds the owner, or — when there is none — picks
the least loaded live broker (this one on a tie) and, when it is this broker (or the client
was sent here authoritatively), takes the bundle. Each live broker holds the ephemeral
``/brokers/<id>`` with its URLs.

**Load** (the placement policy): every ``LOAD_REPORT_S`` each broker writes its load report,
the ephemeral ``/loadbalance/brokers/<id>``: topics loaded and messages per second in and
out over the last interval. A broker's load is ``bundles owned + topics / 100 + msgs/s /
10,000``: a bundle counts one, a hundred topics or 10,000 msgs/s count as much as a bundle.
Only new placements follow it (a bundle moves later only when unloaded), as Pulsar's
default least-loaded placement does without its shedder.

**Unload**: the owner closes the bundle's topics, then deletes its node; the next lookup
places the bundle again. For ``UNLOADED_HOLD_S`` afterwards the broker does not take the
bundle back when a client comes without a lookup (a producer sent here by an answer given
just before the unload): that client is told to look the topic up again, and only a lookup,
which follows the placement, gives the bundle an owner.

**Split** (Pulsar's ``range_equally_divide``): the owner of a bundle divides its range in two
halves. It takes both halves' nodes, then writes the namespace's new boundaries
(``/bundle-boundaries/<tenant>/<ns>``, a compare-and-set), then deletes the old node; its
loaded topics stay where they are (both halves are its own), and each half can be unloaded on
its own afterwards. Every lookup reads the boundaries afresh, and a broker that took a bundle
checks after creating its node that the range is still one of the namespace's bundles
(else it gives the node back and the client retries), so a lookup racing a split cannot
leave two owners of overlapping ranges.

A broker whose session is lost stops serving every topic at once (the callback), before the
server expires the session and another broker can take the bundles; if it was frozen
instead and wakes up late, storage fencing refuses its writes.

**Fast takeover of a crashed owner.** A broker process that died (kill -9, a crash) keeps
its bundles until its ZooKeeper session expires (10 s by default). When a lookup finds the
owner's Pulsar port *refusing* connections (ECONNREFUSED: nothing listens there, the process
is gone), the broker asked takes the bundle at once: under the ephemeral lock
``/bundle-takeovers/<tenant>/<ns>/<range>`` it re-reads the bundle node, deletes it if it
still names the dead broker, and creates its own. A frozen broker (SIGSTOP) still accepts
connections and a cut-off one does not answer at all: for them nothing is decided early,
their session's expiry is. Were the judgement ever wrong, storage fencing would still refuse
the old owner's writes (the new owner recovers and fences each ledger before writing).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from magnetar.broker.errors import BrokerError
from magnetar.broker.errors import NotFoundError as BrokerNotFoundError
from magnetar.core.names import TopicName
from magnetar.meta import MetadataStore
from magnetar.meta.base import SessionState
from magnetar.meta.errors import NodeExistsError, NotFoundError

log = logging.getLogger(__name__)

BROKERS = "/brokers"
BUNDLES = "/bundles"
BOUNDARIES = "/bundle-boundaries"  # <tenant>/<ns>: JSON list, once a bundle was split
BUNDLE_COUNT = 4  # Pulsar's defaultNumberOfNamespaceBundles
FULL = 1 << 32
TAKEOVERS = "/bundle-takeovers"  # ephemeral locks: one broker takes a dead owner's bundle
PROBE_TIMEOUT_S = 0.5  # connecting to a live broker's port takes far less on any network
ALIVE_CACHE_S = 1.0  # a broker that answered is not probed again for this long
LOAD_REPORTS = "/loadbalance/brokers"
LOAD_REPORT_S = 5.0
TOPICS_PER_BUNDLE = 100  # this many topics weigh as much as one bundle ...
RATE_PER_BUNDLE = 10_000.0  # ... and so many messages/s (in + out)
UNLOADED_HOLD_S = 10.0  # a client's lookup from before an unload is answered by then


class BundleNotFoundError(BrokerNotFoundError):
    """No such bundle in the namespace (a split names one of its current ranges)."""

    code = "broker.bundle_not_found"


class NotOwnerError(BrokerError):
    """This broker does not own the topic's bundle: look the topic up again (Pulsar answers
    ServiceNotReady, which makes its client do so)."""

    code = "broker.not_owner"
    http_status = 503
    pulsar_error = "ServiceNotReady"
    kafka_error = "NOT_LEADER_OR_FOLLOWER"  # another broker serves it
    retriable = True


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    id: str
    pulsar: str  # pulsar://host:port
    http: str  # http://host:port
    kafka: str  # host:port
    kafka_node: int = 0  # its Kafka node id (stable: kept in its data directory)
    # advertised listener name → {"pulsar": url, "pulsar+ssl": url}, as a lookup naming
    # that listener is answered for topics this broker owns
    listeners: dict[str, dict[str, str]] = field(default_factory=dict, hash=False)
    # its TLS listeners, "" when off: pulsar+ssl://host:port, https://host:port, host:port
    pulsar_tls: str = ""
    https: str = ""
    kafka_tls: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> BrokerInfo:
        d = json.loads(data)
        return cls(
            d["id"], d["pulsar"], d["http"], d["kafka"], d.get("kafka_node", 0),
            d.get("listeners", {}), d.get("pulsar_tls", ""), d.get("https", ""),
            d.get("kafka_tls", ""),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a broker handles (``/loadbalance/brokers/<id>``)."""

    topics: int = 0
    msg_rate: float = 0.0  # messages/s in + out over the last report interval
    at_ms: int = 0

    def weight(self) -> float:
        """Its share of a broker's load, in bundles."""
        return self.topics / TOPICS_PER_BUNDLE + self.msg_rate / RATE_PER_BUNDLE

    def to_json(self) -> dict[str, Any]:
        return {"topics": self.topics, "msgRate": self.msg_rate, "timestamp": self.at_ms}

    @classmethod
    def from_bytes(cls, data: bytes) -> LoadReport:
        raw = json.loads(data)
        return cls(int(raw["topics"]), float(raw["msgRate"]), int(raw["timestamp"]))


# what a broker counts for its load report: (topics loaded, messages in + out so far)
LoadSource = Callable[[], tuple[int, int]]


def bundle_of(name: TopicName, count: int = BUNDLE_COUNT) -> str:
    """The bundle range of ``name`` among ``count`` equal bundles (a partition hashes by its
    own name, as in Pulsar)."""
    return bundle_in(name, equal_boundaries(count))


def equal_boundaries(count: int = BUNDLE_COUNT) -> list[int]:
    size = FULL // count
    return [i * size for i in range(count)] + [FULL]


def bundle_in(name: TopicName, boundaries: list[int]) -> str:
    """The bundle range of ``name`` under a namespace's ``boundaries`` (sorted, 0 .. FULL)."""
    h = zlib.crc32(str(name).encode()) & 0xFFFFFFFF
    i = bisect.bisect_right(boundaries, h) - 1
    return range_name(boundaries[i], boundaries[i + 1])


def range_name(lo: int, hi: int) -> str:
    return f"0x{lo:08x}_0x{hi:08x}"


def parse_range(text: str) -> tuple[int, int]:
    """``0x00000000_0x40000000`` as (lo, hi); ValueError for anything else."""
    lo, sep, hi = text.partition("_")
    if not sep or not lo.startswith("0x") or not hi.startswith("0x"):
        raise ValueError(f"not a bundle range: {text!r} (expected 0xLO_0xHI, hex)")
    return int(lo, 16), int(hi, 16)


class Ownership:
    def __init__(
        self,
        meta: MetadataStore,
        me: BrokerInfo,
        on_lost: Callable[[], None] | None = None,
        load: LoadSource | None = None,
    ) -> None:
        self.meta = meta
        self.me = me
        self.on_lost = on_lost
        self.load_source = load
        self.load = LoadReport()  # the last report written
        self._reporter: asyncio.Task[None] | None = None
        self.owned: set[str] = set()  # bundle paths this broker holds
        self.unloading: set[str] = set()  # being handed back: lookups wait, nothing loads
        self._unloaded: dict[str, float] = {}  # bundle path → when this broker gave it back
        self._lock = asyncio.Lock()
        self._stop_session: Callable[[], None] | None = None
        self._answered: dict[str, float] = {}  # broker id -> when its port last accepted
        self._bounds: dict[tuple[str, str], list[int]] = {}  # last read, per namespace
        self.takeovers = 0  # bundles taken from a crashed owner before its session ended

    async def start(self) -> None:
        for path in (BROKERS, BUNDLES, BOUNDARIES, TAKEOVERS, "/loadbalance", LOAD_REPORTS):
            with contextlib.suppress(NodeExistsError):
                await self.meta.put(path, b"", expected_version=-1)
        await self._register()
        self._stop_session = self.meta.on_session(self._session)  # type: ignore[attr-defined]
        if self.load_source is not None:
            self._reporter = asyncio.get_running_loop().create_task(self._report_load())

    async def _report_load(self) -> None:
        assert self.load_source is not None
        path = f"{LOAD_REPORTS}/{self.me.id}"
        _, last = self.load_source()
        last_at = time.monotonic()
        while True:
            await asyncio.sleep(LOAD_REPORT_S)
            topics, total = self.load_source()
            now = time.monotonic()
            rate = max(0.0, (total - last) / max(now - last_at, 1e-3))  # unloads count down
            last, last_at = total, now
            self.load = LoadReport(topics, round(rate, 1), int(time.time() * 1000))
            data = json.dumps(self.load.to_json()).encode()
            try:
                if await self.meta.get(path) is None:
                    await self.meta.create_ephemeral(path, data)  # type: ignore[attr-defined]
                else:
                    await self.meta.put(path, data)
            except Exception as e:  # cut off from ZooKeeper: the next round tries again
                log.debug("broker %s: load report not written: %s", self.me.id, e)

    async def loads(self) -> dict[str, LoadReport]:
        """The last load report of every broker that wrote one."""
        out = {}
        for child in await self.meta.list_children(LOAD_REPORTS):
            node = await self.meta.get(f"{LOAD_REPORTS}/{child}")
            if node is not None and node.value:
                with contextlib.suppress(ValueError, KeyError):
                    out[child] = LoadReport.from_bytes(node.value)
        return out

    async def _register(self) -> None:
        path = f"{BROKERS}/{self.me.id}"
        if await self.meta.get(path) is not None:  # our own, from a session not yet expired
            with contextlib.suppress(NotFoundError):
                await self.meta.delete(path)
        await self.meta.create_ephemeral(path, self.me.to_bytes())  # type: ignore[attr-defined]

    def _session(self, state: SessionState) -> None:
        if state is SessionState.LOST and self.owned:
            log.warning(
                "broker %s lost its ZooKeeper session: it stops serving %d bundle(s)",
                self.me.id,
                len(self.owned),
            )
            self.owned.clear()
            if self.on_lost is not None:
                self.on_lost()
        elif state is SessionState.CONNECTED:
            asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        try:
            if await self.meta.get(f"{BROKERS}/{self.me.id}") is None:
                await self._register()
        except Exception as e:
            log.warning("broker %s: registering again failed: %s", self.me.id, e)

    async def brokers(self) -> list[BrokerInfo]:
        out = []
        for child in await self.meta.list_children(BROKERS):
            node = await self.meta.get(f"{BROKERS}/{child}")
            if node is not None and node.value:
                out.append(BrokerInfo.from_bytes(node.value))
        return out

    def bundle_path(self, name: TopicName) -> str:
        """The ownership node of ``name``'s bundle, under the boundaries last read (every
        lookup reads them first; see :meth:`boundaries`)."""
        bounds = self._bounds.get((name.tenant, name.namespace)) or equal_boundaries()
        return f"{BUNDLES}/{name.tenant}/{name.namespace}/{bundle_in(name, bounds)}"

    async def boundaries(self, tenant: str, namespace: str) -> list[int]:
        """The namespace's bundle boundaries, read afresh (and remembered)."""
        node = await self.meta.get(f"{BOUNDARIES}/{tenant}/{namespace}")
        bounds = json.loads(node.value) if node is not None and node.value else equal_boundaries()
        self._bounds[(tenant, namespace)] = bounds
        return list(bounds)

    async def _fresh_path(self, name: TopicName) -> str:
        await self.boundaries(name.tenant, name.namespace)
        return self.bundle_path(name)

    async def owner(self, name: TopicName) -> BrokerInfo | None:
        return await self._owner_at(await self._fresh_path(name))

    async def _owner_at(self, path: str) -> BrokerInfo | None:
        node = await self.meta.get(path)
        return BrokerInfo.from_bytes(node.value) if node is not None and node.value else None

    async def lookup(
        self, name: TopicName, *, authoritative: bool = False
    ) -> tuple[BrokerInfo, bool]:
        """(broker, True) when that broker owns ``name``; (broker, False) when nobody does
        and that other broker should take it (send the client there, authoritatively). An
        unowned topic whose choice is this broker, or an authoritative lookup, takes it."""
        path = await self._fresh_path(name)  # the boundaries, read once per lookup
        if path in self.unloading:
            raise NotOwnerError(f"the bundle of {name} is being unloaded; look it up again")
        owner = await self._owner_at(path)
        if owner is not None and owner.id != self.me.id and not await self.alive(owner):
            return await self._take_over(name, owner), True
        if owner is not None:
            return owner, True
        target = await self._least_loaded()
        if authoritative or target.id == self.me.id:
            return await self.acquire(name), True
        return target, False

    async def _least_loaded(self) -> BrokerInfo:
        brokers = await self.brokers()
        counts = dict.fromkeys((b.id for b in brokers), 0)
        for tenant in await self.meta.list_children(BUNDLES):
            for ns in await self.meta.list_children(f"{BUNDLES}/{tenant}"):
                for bundle in await self.meta.list_children(f"{BUNDLES}/{tenant}/{ns}"):
                    node = await self.meta.get(f"{BUNDLES}/{tenant}/{ns}/{bundle}")
                    if node is not None and node.value:
                        owner = BrokerInfo.from_bytes(node.value).id
                        counts[owner] = counts.get(owner, 0) + 1
        live = [
            b for b in brokers if b.id in counts and (b.id == self.me.id or await self.alive(b))
        ] or [self.me]
        loads = await self.loads()

        def load(b: BrokerInfo) -> float:
            return counts.get(b.id, 0) + loads.get(b.id, LoadReport()).weight()

        return min(live, key=lambda b: (load(b), b.id != self.me.id, b.id))

    async def acquire(self, name: TopicName) -> BrokerInfo:
        """Take ``name``'s bundle unless someone holds it; the owner either way."""
        path = await self._fresh_path(name)
        async with self._lock:
            if path in self.owned:
                return self.me
            for parent in (
                f"{BUNDLES}/{name.tenant}",
                f"{BUNDLES}/{name.tenant}/{name.namespace}",
            ):
                with contextlib.suppress(NodeExistsError):
                    await self.meta.put(parent, b"", expected_version=-1)
            try:
                await self.meta.create_ephemeral(path, self.me.to_bytes())  # type: ignore[attr-defined]
            except NodeExistsError:
                owner = await self._owner_at(path)
                if owner is None:  # gone meanwhile: the next lookup takes it
                    raise NotOwnerError(f"bundle of {name} is changing hands; retry") from None
                if owner.id != self.me.id:
                    return owner
                # a node of this broker's previous life (restarted before its old session
                # expired): it would vanish with that session; hold it under this one
                with contextlib.suppress(NotFoundError):
                    await self.meta.delete(path)
                try:
                    await self.meta.create_ephemeral(path, self.me.to_bytes())  # type: ignore[attr-defined]
                except NodeExistsError:
                    raise NotOwnerError(f"bundle of {name} is changing hands; retry") from None
            if await self._fresh_path(name) != path:  # split meanwhile: not a bundle any more
                with contextlib.suppress(NotFoundError):
                    await self.meta.delete(path)
                raise NotOwnerError(f"the bundle of {name} was just split; look it up again")
            self.owned.add(path)
            log.info("broker %s owns bundle %s", self.me.id, path)
            return self.me

    async def split(self, tenant: str, namespace: str, bundle: str) -> list[str]:
        """Split ``bundle`` (owned here, or taken now if nobody owns it) into two equal
        halves, both owned here; returns their ranges (see the module doc)."""
        lo, hi = parse_range(bundle)
        bounds = await self.boundaries(tenant, namespace)
        ranges = list(itertools.pairwise(bounds))
        if (lo, hi) not in ranges:
            raise BundleNotFoundError(
                f"{tenant}/{namespace} has no bundle {bundle}; its bundles: "
                + ", ".join(range_name(a, b) for a, b in ranges)
            )
        if hi - lo < 2:
            raise BundleNotFoundError(f"bundle {bundle} is too small to split")
        prefix = f"{BUNDLES}/{tenant}/{namespace}"
        old = f"{prefix}/{bundle}"
        if old not in self.owned:
            node = await self.meta.get(old)
            if node is not None and node.value:
                owner = BrokerInfo.from_bytes(node.value)
                if owner.id != self.me.id:
                    raise NotOwnerError(f"bundle {bundle} is owned by {owner.id}: split it there")
        mid = lo + (hi - lo) // 2
        halves = [range_name(lo, mid), range_name(mid, hi)]
        async with self._lock:
            for parent in (f"{BUNDLES}/{tenant}", prefix, f"{BOUNDARIES}/{tenant}"):
                with contextlib.suppress(NodeExistsError):
                    await self.meta.put(parent, b"", expected_version=-1)
            taken: list[str] = []
            try:
                for half in halves:
                    await self.meta.create_ephemeral(f"{prefix}/{half}", self.me.to_bytes())  # type: ignore[attr-defined]
                    taken.append(f"{prefix}/{half}")
                path = f"{BOUNDARIES}/{tenant}/{namespace}"
                node = await self.meta.get(path)
                value = json.dumps(sorted({*bounds, mid})).encode()
                await self.meta.put(path, value, expected_version=node.stat.version if node else -1)
            except Exception:
                for t in taken:
                    with contextlib.suppress(Exception):
                        await self.meta.delete(t)
                raise
            self.owned.update(taken)
            self._bounds[(tenant, namespace)] = sorted({*bounds, mid})
            with contextlib.suppress(NotFoundError):
                await self.meta.delete(old)
            self.owned.discard(old)
        log.info("broker %s split bundle %s/%s into %s", self.me.id, prefix, bundle, halves)
        return halves

    async def alive(self, broker: BrokerInfo) -> bool:
        """False only when ``broker``'s Pulsar port refuses a connection: its process is
        gone. A timeout or any other error says nothing (frozen, cut off, slow): True, and
        its session decides."""
        if time.monotonic() - self._answered.get(broker.id, -ALIVE_CACHE_S) < ALIVE_CACHE_S:
            return True
        address = urlsplit(broker.pulsar)
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(address.hostname, address.port), PROBE_TIMEOUT_S
            )
        except ConnectionRefusedError:
            return False
        except (OSError, TimeoutError):
            return True
        writer.close()
        self._answered[broker.id] = time.monotonic()
        return True

    async def _take_over(self, name: TopicName, dead: BrokerInfo) -> BrokerInfo:
        """Take ``name``'s bundle from ``dead`` (its port refuses connections) without
        waiting for its session to expire; the owner afterwards (see the module doc)."""
        path = self.bundle_path(name)
        lock = f"{TAKEOVERS}/{quote(path.removeprefix(BUNDLES + '/'), safe='')}"
        try:
            await self.meta.create_ephemeral(lock, self.me.to_bytes())  # type: ignore[attr-defined]
        except NodeExistsError:
            raise NotOwnerError(f"the bundle of {name} is being taken over; retry") from None
        try:
            node = await self.meta.get(path)
            if node is not None and node.value and BrokerInfo.from_bytes(node.value).id == dead.id:
                with contextlib.suppress(NotFoundError):
                    await self.meta.delete(path, expected_version=node.stat.version)
                self.takeovers += 1
                log.warning(
                    "broker %s refuses connections: %s takes bundle %s before its session ends",
                    dead.id,
                    self.me.id,
                    path,
                )
            return await self.acquire(name)
        finally:
            with contextlib.suppress(NotFoundError):
                await self.meta.delete(lock)

    async def check(self, name: TopicName) -> None:
        """Raise NotOwnerError unless this broker owns ``name`` (taking it when unowned,
        unless this broker unloaded it within ``UNLOADED_HOLD_S``: see the module doc)."""
        path = self.bundle_path(name)
        if path in self.unloading:
            raise NotOwnerError(f"the bundle of {name} is being unloaded; look it up again")
        if path in self.owned:
            return
        if time.monotonic() - self._unloaded.get(path, -UNLOADED_HOLD_S) < UNLOADED_HOLD_S:
            raise NotOwnerError(f"the bundle of {name} was just unloaded here; look it up again")
        owner = await self.acquire(name)
        if owner.id != self.me.id:
            raise NotOwnerError(f"topic {name} is served by broker {owner.id} ({owner.pulsar})")

    def owns(self, name: TopicName) -> bool:
        return self.bundle_path(name) in self.owned

    async def bundles(self, tenant: str, namespace: str) -> list[str]:
        """The bundle ranges of a namespace (Pulsar's boundaries, as ranges), read afresh."""
        bounds = await self.boundaries(tenant, namespace)
        return [range_name(a, b) for a, b in itertools.pairwise(bounds)]

    async def release(self, path: str) -> None:
        """Give one bundle back (after its topics were unloaded)."""
        with contextlib.suppress(NotFoundError):
            await self.meta.delete(path)
        self.owned.discard(path)
        now = time.monotonic()
        self._unloaded = {p: t for p, t in self._unloaded.items() if now - t < UNLOADED_HOLD_S}
        self._unloaded[path] = now

    async def release_all(self) -> None:
        """Graceful shutdown: give every bundle back (the next lookup moves it)."""
        for path in list(self.owned):
            with contextlib.suppress(Exception):
                await self.meta.delete(path)
        self.owned.clear()

    def close(self) -> None:
        if self._stop_session is not None:
            self._stop_session()
        if self._reporter is not None:
            self._reporter.cancel()

    def describe(self) -> dict[str, Any]:
        return {"id": self.me.id, "bundles": sorted(self.owned)}
