"""``ViewService``: the views of one node — definitions, their runners, reads and as-of.

Durable: each definition lives in the metadata store under ``/views/{name}`` (as-of views
under ``/views/{name}@{label}``) before its query starts; the state and the offsets it
reflects live in the view's state store; Spark's checkpoint under
``DATA_DIR/views/{name}/v{version}``. After a crash every view resumes from its checkpoint
and store (a replayed batch is skipped). Spark starts on the first view, in a thread.

With several brokers each view runs on one of them, its leader (:mod:`.leader`); the others
answer calls about it with a redirect there (307, as Pulsar's admin API does for a topic
another broker owns). A new leader resumes from the store's offsets; a view whose Spark
state stayed with the old leader (an aggregation over a local checkpoint) is built again as
a new version while its last rows keep being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any, TypeVar

from magnetar.broker import Broker
from magnetar.broker.records import LeaseKind, RecordStore
from magnetar.core.config import Settings
from magnetar.core.names import TopicName
from magnetar.core.tokens import client_token
from magnetar.spark import planning
from magnetar.spark.options import SparkSourceError, parse
from magnetar.views import asof
from magnetar.views.errors import (
    InvalidViewError,
    ViewConflictError,
    ViewError,
    ViewMovedError,
    ViewNotFoundError,
    ViewNotLedError,
)
from magnetar.views.filters import column_types_of_row, key_filter
from magnetar.views.leader import CHECK_S, PATIENCE_S, Alone, ViewLeaders
from magnetar.views.model import Offsets, ViewDefinition, ViewState, check_name, key_text
from magnetar.views.records import (
    AsOfRecord,
    Failure,
    Record,
    VersionRecord,
    ViewRecord,
    record_from_json,
)
from magnetar.views.runner import RunOptions, ViewRunner
from magnetar.views.session import first_line, spark_session
from magnetar.views.status import describe, describe_virtual
from magnetar.views.stores import StateStore, dataset_name, open_state_store
from magnetar.views.stores.factory import resolve_store_url

log = logging.getLogger(__name__)
T = TypeVar("T")


class ViewService:
    """Create, serve, rebuild and delete views; see the module docstring."""

    def __init__(self, settings: Settings, definitions: RecordStore, broker: Broker | None) -> None:
        self.settings = settings
        self.definitions = definitions  # the broker's RecordKind.VIEWS
        self.broker = broker
        self.url = ""
        self.records: dict[str, Record] = {}
        self.runners: dict[str, ViewRunner] = {}  # name → the version being served
        self.pending: dict[str, ViewRunner] = {}  # name → a new version still backfilling
        self._stores: dict[str, StateStore] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self.leaders: Alone | ViewLeaders = Alone()
        if broker is not None and broker.ownership is not None:
            ownership = broker.ownership
            leases = broker.leases(LeaseKind.VIEWS)
            self.leaders = ViewLeaders(leases, ownership.me, ownership.brokers, self._lost)
        self._leaderless: dict[str, float] = {}  # view → since when nobody leads it
        # the node's own client credential: views read their sources through this node's
        # HTTP port, which asks for one when authentication is on
        self._token = client_token(settings.broker_client_auth_token)

    # -- lifecycle of the service ---------------------------------------------------------

    async def start(self, url: str) -> None:
        """Load every definition; views resume in the background (Spark starts lazily).
        With several brokers, only the views this broker comes to lead (see :meth:`_lead`)."""
        self.url, self._loop = url, asyncio.get_running_loop()
        await self._load_records()
        if self.leaders.clustered:
            self._spawn(self._lead())
        elif any(not r.virtual for r in self.records.values()):
            self._spawn(self._resume_all())

    async def _load_records(self) -> None:
        found_names = set()
        for name in await self.definitions.keys():
            found = await self.definitions.get(name)
            if found is not None:
                found_names.add(name)
                if not self._mine(name):  # those this broker leads, it keeps current itself
                    self.records[name] = record_from_json(name, json.loads(found.value))
        for gone in set(self.records) - found_names:  # deleted by its leader
            if not self._mine(gone):
                del self.records[gone]

    def _mine(self, name: str) -> bool:
        """Whether this broker leads ``name`` (or its base view) among several brokers."""
        return self.leaders.clustered and self.leaders.epoch(name.split("@")[0]) is not None

    async def _known(self, name: str) -> None:
        """ViewNotFoundError unless ``name`` exists (created on another broker since the
        last look included)."""
        if name not in self.records and self.leaders.clustered:
            await self._load_records()
        self._record(name)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self._stop_runners()
        for name in list(self.records):  # hand them over at once, not at session expiry
            with contextlib.suppress(Exception):
                await self.leaders.release(name)
        self.leaders.close()
        for store in self._stores.values():
            store.close()
        self._stores.clear()

    async def _stop_runners(self) -> None:
        runners = [*self.runners.values(), *self.pending.values()]
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in runners))

    # -- leadership (several brokers) -----------------------------------------------------

    async def _lead(self) -> None:
        """Every CHECK_S: learn views created or deleted elsewhere, and take the views
        nobody leads (its preferred broker at once, any broker after PATIENCE_S). A failed
        round is logged once per distinct error, and once more when rounds succeed again."""
        failing: str | None = None
        while True:
            try:
                await self._load_records()
                for name, record in sorted(self.records.items()):
                    if not record.virtual and self.leaders.epoch(name) is None:
                        await self._maybe_take(name)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # cut off from ZooKeeper: the next round tries again
                if first_line(e) != failing:
                    failing = first_line(e)
                    log.warning("views: taking views nobody leads failed (retried): %s", failing)
            else:
                if failing is not None:
                    log.warning("views: taking views nobody leads works again")
                    failing = None
            await asyncio.sleep(CHECK_S)

    async def _maybe_take(self, name: str) -> None:
        if await self.leaders.leader(name) is not None:
            self._leaderless.pop(name, None)
            return
        since = self._leaderless.setdefault(name, time.monotonic())
        if time.monotonic() - since >= PATIENCE_S or await self.leaders.preferred(name):
            await self._take(name, wait=False)

    async def _take(self, name: str, *, wait: bool = True) -> bool:
        """Lead ``name`` if nobody does, and start its runners (behind, unless ``wait``);
        False if another leads it. The leadership round does not wait: a slow start (this
        broker's first Spark session, a long restore) must not keep the next view it
        takes over waiting for a leader."""
        async with self._lock:
            if self.leaders.epoch(name) is not None:
                return True
            if await self.leaders.acquire(name) is None:
                return False
            self._leaderless.pop(name, None)
            found = await self.definitions.get(name)
            if found is None:  # deleted meanwhile
                await self.leaders.release(name)
                self.records.pop(name, None)
                return False
            record = record_from_json(name, json.loads(found.value))
            self.records[name] = record
            if not isinstance(record, ViewRecord):
                return True
            log.info("view %s: led by this broker now (epoch %s)", name, self.leaders.epoch(name))
            try:
                launch = await self._resume(record)
            except Exception as e:
                self._resume_failed(name, e)
                return True
        if wait:
            await self._start(name, launch)
        else:
            self._spawn(self._start(name, launch))
        return True

    async def _start(self, name: str, launch: list[ViewRunner]) -> None:
        for runner in launch:
            if runner is not self.runners.get(name) and runner is not self.pending.get(name):
                continue  # retired meanwhile (the view deleted, or replaced by a new version)
            started = time.monotonic()
            try:
                await self._launch(runner)
            except Exception as e:
                self._resume_failed(name, e)  # logged there
            else:
                log.info("view %s: started in %.1f s", runner.dataset, time.monotonic() - started)

    def _lost(self) -> None:
        """The ZooKeeper session ended: another broker may lead any view now. Stop every
        query at once (the store refuses their commits anyway, once fenced)."""
        runners = [*self.runners.values(), *self.pending.values()]
        self.runners.clear()
        self.pending.clear()
        for runner in runners:
            self._spawn(asyncio.to_thread(runner.stop))

    async def _route(self, name: str) -> None:
        """Serve a call about ``name`` here only if this broker leads it (or comes to lead
        it now, nobody leading it); else ViewMovedError naming the leader."""
        base = name.split("@")[0]
        if self.leaders.epoch(base) is not None:
            return
        leader = await self.leaders.leader(base)
        if leader is None and (base not in self.records or await self._take(base)):
            return  # a new view (created here), or one this broker just took
        leader = leader or await self.leaders.leader(base)
        if leader is None:
            raise ViewNotLedError(f"no broker leads view {base!r} yet; retry in a few seconds")
        raise ViewMovedError(
            f"view {base!r} runs on broker {leader.broker}", leader.http, leader.https
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resume_all(self) -> None:
        """Build every runner first (so statuses show stored positions at once), then start
        their queries one by one; one broken view does not keep the others down."""
        launch: list[ViewRunner] = []
        for name, record in sorted(self.records.items()):
            if isinstance(record, ViewRecord):
                try:
                    launch += await self._resume(record)
                except Exception as e:
                    self._resume_failed(name, e)
        for runner in launch:
            try:
                await self._launch(runner)
            except Exception as e:
                self._resume_failed(runner.definition.name, e)

    def _resume_failed(self, name: str, error: Exception) -> None:
        log.error("view %s could not resume: %s", name, error, exc_info=error)
        record = self.records.get(name)
        if isinstance(record, ViewRecord):
            record.resume_error = (
                f"could not resume after the restart: {first_line(error)} "
                "(PUT the same definition again to retry)"
            )

    async def _resume(self, record: ViewRecord) -> list[ViewRunner]:
        name = record.name
        record.resume_error = None
        runner = await self._runner(name, record.current)
        self.runners[name] = runner
        launch = []
        if record.current.failed is not None:
            runner.state, runner.error = ViewState.FAILED, record.current.failed.error
            runner.failed_at = record.current.failed.at
        else:
            launch.append(runner)
        if record.pending is not None:
            self.pending[name] = await self._runner(name, record.pending)
            launch.append(self.pending[name])
        return launch

    # -- runners ---------------------------------------------------------------------------

    async def _runner(self, name: str, version: VersionRecord) -> ViewRunner:
        definition = ViewDefinition.parse(name, version.definition)
        store = await self._store(definition.store)
        return ViewRunner(
            definition,
            version.version,
            dataset_name(name, version.version),
            store,
            self._checkpoint(name, version.version),
            version.bootstrap,
            self._changed,
        )

    def _checkpoint(self, name: str, version: int) -> Path:
        return (self.settings.data_dir / "views" / name / f"v{version}").resolve()

    async def _store(self, url: str) -> StateStore:
        resolved = resolve_store_url(url, self.settings.data_dir)
        if resolved not in self._stores:
            self._stores[resolved] = await asyncio.to_thread(open_state_store, resolved)
        return self._stores[resolved]

    def _options(self) -> RunOptions:
        s = self.settings
        return RunOptions(
            self.url,
            s.views_max_batch_events,
            s.views_trigger_ms,
            s.views_python_dirs,
            self._token,
        )

    def _source_options(self, topics: list[str]) -> dict[str, str]:
        """The magnetar source's options for planning reads of ``topics`` from this node."""
        found = {"url": self.url, "topics": ",".join(topics)}
        return {**found, "token": self._token} if self._token else found

    def _spark(self) -> Any:
        s = self.settings
        conf = {"spark.driver.memory": s.spark_driver_memory}
        return spark_session(s.spark_master, conf)

    async def _launch(self, runner: ViewRunner) -> None:
        """Validate and start ``runner``'s query (Spark work in a thread). It becomes LIVE
        once it has applied everything published before now (CATCHING_UP until then). A
        version that cannot resume on this broker (see :meth:`ViewRunner.adopt`) is built
        again: the served one as a new version, a pending one from the start."""
        name = runner.definition.name
        epoch = self.leaders.epoch(name)
        if epoch is None:
            return  # led elsewhere now
        ends = await self._end_offsets(list(runner.definition.source))
        if ends is not None:
            runner.aim(ends)
        spark, opts = await asyncio.to_thread(self._spark), self._options()
        if await asyncio.to_thread(runner.adopt, epoch, spark, opts):
            await asyncio.to_thread(self._start_prepared, runner)
        elif self.pending.get(name) is runner:
            await asyncio.to_thread(runner.store.drop, runner.dataset)
            await self._launch(runner)
        else:
            self._spawn(self._rebuild(runner))  # under the lock, which the caller may hold

    async def _rebuild(self, runner: ViewRunner) -> None:
        """The served version's Spark state is not on this broker: keep serving its rows
        (the query stays stopped) while a new version is built from the history."""
        name = runner.definition.name
        runner.state = ViewState.STOPPED
        runner.error = (
            "its Spark state stayed with the broker that led it before; a new version is "
            "being built from the history on this broker and replaces it when caught up"
        )
        log.warning("view %s: %s", name, runner.error)
        async with self._lock:
            record = self.records[name]
            if isinstance(record, ViewRecord) and record.pending is None:
                await self._create(runner.definition, version=record.next_version())

    def _changed(self, runner: ViewRunner) -> None:
        """Called from Spark's threads when a runner changes state."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lambda: self._spawn(self._on_change(runner)))

    async def _on_change(self, runner: ViewRunner) -> None:
        name = runner.definition.name
        async with self._lock:
            record = self.records.get(name)
            if not isinstance(record, ViewRecord):
                return
            if runner.state == ViewState.FAILED:
                failure = Failure(runner.error or "failed", runner.failed_at)
                record.fail(failure, pending=self.pending.get(name) is runner)
                await self._save(record)
            elif runner.state == ViewState.LIVE and self.pending.get(name) is runner:
                await self._swap(record, runner)

    async def _swap(self, record: ViewRecord, new: ViewRunner) -> None:
        """The new version caught up: serve it, then retire the old one (atomic for readers:
        the stable name in the store is re-pointed in one step)."""
        name = record.name
        old = self.runners.get(name)
        record.promote()
        await self._save(record)
        await asyncio.to_thread(new.store.alias, name, new.dataset)
        self.runners[name] = new
        del self.pending[name]
        if old is not None:
            await self._retire(old)

    async def _retire(self, runner: ViewRunner) -> None:
        await asyncio.to_thread(runner.stop)
        await asyncio.to_thread(runner.store.drop, runner.dataset)
        await asyncio.to_thread(shutil.rmtree, runner.checkpoint, True)

    async def _save(self, record: Record) -> None:
        name = record.name
        if self.leaders.epoch(name.split("@")[0]) is None:
            log.warning("view %s: not saved, another broker leads it now", name)
            return
        self.records[name] = record
        body = json.dumps(record.to_json(), sort_keys=True).encode()
        await self.definitions.put(name, body)

    # -- the API ---------------------------------------------------------------------------

    async def put(self, name: str, body: Any) -> tuple[dict[str, Any], bool]:
        """Create a view, or build a new version of it; returns (status, created)."""
        definition = ViewDefinition.parse(name, body)
        await self._route(name)
        async with self._lock:
            if self.leaders.epoch(name) is None and await self.leaders.acquire(name) is None:
                raise ViewConflictError(f"another broker took view {name!r} meanwhile; retry")
            record = self.records.get(name)
            if isinstance(record, AsOfRecord):
                raise InvalidViewError(f"{name} is an as-of view: it cannot be redefined")
            if record is None:
                try:
                    await self._create(definition, version=1)
                except BaseException:
                    if name not in self.records:  # nothing to lead: let any broker create it
                        await self.leaders.release(name)
                    raise
                return await self.status(name), True
            same = record.definition == definition.to_json()
            if same and record.resume_error is not None:
                record.resume_error = None
                try:
                    await self._retry(record)
                except Exception as e:
                    self._resume_failed(name, e)
                    raise
                return await self.status(name), False
            if same and name in self.pending:
                return await self.status(name), False
            if same and record.current.failed is None:
                return await self.status(name), False
            if same:
                await self._retry(record)
            else:
                await self._create(definition, version=record.next_version())
        return await self.status(name), False

    async def _create(self, definition: ViewDefinition, *, version: int) -> None:
        name = definition.name
        version_record = VersionRecord(
            definition.to_json(),
            version,
            await asyncio.to_thread(self._bootstrap_offsets, definition),
            int(time.time() * 1000),
        )
        runner = await self._runner(name, version_record)
        await asyncio.to_thread(lambda: runner.prepare(self._spark(), self._options()))
        record = self.records.get(name)
        if not isinstance(record, ViewRecord):
            record, self.runners[name] = ViewRecord(name, version_record), runner
        else:
            old = self.pending.pop(name, None)
            record.build(version_record)
            self.pending[name] = runner
            if old is not None:
                await self._retire(old)
        await self._save(record)
        await self._launch(runner)

    def _start_prepared(self, runner: ViewRunner) -> None:
        runner.start(runner.prepare(self._spark(), self._options()), self._options())
        if self.runners.get(runner.definition.name) is runner:
            runner.store.alias(runner.definition.name, runner.dataset)

    async def _retry(self, record: ViewRecord) -> None:
        """A FAILED view with the same definition: resume it from its last commit."""
        record.retry()
        await self._save(record)
        runner = await self._runner(record.name, record.current)
        self.runners[record.name] = runner
        await self._launch(runner)

    def _bootstrap_offsets(self, definition: ViewDefinition) -> dict[str, Offsets]:
        """Earliest and latest offsets now: the backfill runs from one to the other."""
        try:
            opts = parse(self._source_options(list(definition.source)), streaming=False)
            plans = planning.fetch_plans(opts)
        except SparkSourceError as e:
            raise InvalidViewError(f"bad source: {e}") from None
        return {
            "start": planning.bounds(plans, "earliest", end=False),
            "target": planning.bounds(plans, "latest", end=True),
        }

    def _planned_ends(self, topics: list[str]) -> Offsets | None:
        try:
            opts = parse(self._source_options(topics), streaming=False)
            ends: Offsets = planning.bounds(planning.fetch_plans(opts), "latest", end=True)
        except SparkSourceError as e:  # a broker between owners: the next call knows
            log.debug("views: end offsets of %s not known now: %s", topics, e)
            return None
        return ends

    async def names(self) -> list[str]:
        return sorted(self.records)

    async def status(self, name: str) -> dict[str, Any]:
        await self._known(name)
        await self._route(name)
        return await self._status(name)

    async def _status(self, name: str) -> dict[str, Any]:
        record = self._record(name)
        if isinstance(record, AsOfRecord):
            store = await self._store(record.definition.get("store", "sqlite"))
            return await asyncio.to_thread(describe_virtual, record, store)
        runner = self.runners.get(name)
        ends = await self._end_offsets(record.definition["source"])
        out = describe(record, runner, self.pending.get(name), ends)
        if record.resume_error is not None:
            out["state"], out["error"] = ViewState.FAILED.value, record.resume_error
        if isinstance(self.leaders, ViewLeaders):
            out["leader"] = {"broker": self.leaders.me.id, "epoch": self.leaders.epoch(name)}
        return out

    async def statuses(self) -> list[dict[str, Any]]:
        """Every view's status: from this broker for the views it leads, else the stored
        definition with the broker that leads it (``GET /views/{name}`` there tells more)."""
        out = []
        for name in await self.names():
            base = name.split("@")[0]
            if self.leaders.epoch(base) is not None:
                out.append(await self._status(name))
                continue
            leader = await self.leaders.leader(base)
            record = self.records[name]
            out.append(
                {
                    "name": name,
                    "state": "ELSEWHERE",
                    "version": record.version if isinstance(record, ViewRecord) else None,
                    "definition": record.definition,
                    "leader": leader.to_json() if leader is not None else None,
                }
            )
        return out

    def _record(self, name: str) -> Record:
        record = self.records.get(name)
        if record is None:
            raise ViewNotFoundError(f"no view named {name!r}")
        return record

    async def _end_offsets(self, topics: list[str]) -> Offsets | None:
        if self.broker is None:
            return None
        if self.leaders.clustered:  # partitions may be served by other brokers: ask the plan
            return await asyncio.to_thread(self._planned_ends, topics)
        out: Offsets = {}
        for topic in topics:
            name = TopicName.parse(topic)
            count = await self.broker.partitions(name)
            parts = [(i, name.partition_name(i)) for i in range(count)] if count else [(0, name)]
            out[topic] = {}
            for index, part in parts:
                if await self.broker.topic_exists(part):
                    found = await self.broker.get_topic(part)
                    out[topic][str(index)] = found.end_offset
        return out

    async def rows(self, name: str, query: dict[str, str], limit: int) -> list[dict[str, Any]]:
        """Rows by key (every key column given in ``query``) or the first ``limit``; any other
        filter is refused (InvalidViewError naming the view's columns)."""
        await self._known(name)
        await self._route(name)
        record = self._record(name)
        definition = record.definition
        store = await self._store(definition.get("store", "sqlite"))
        if isinstance(record, AsOfRecord):
            dataset = record.dataset
        else:
            dataset = dataset_name(name, record.version)
        key = definition["key"]
        columns = await asyncio.to_thread(self._columns, name, store, dataset) if query else {}
        values = key_filter(name, query, key, columns)
        if values is not None:
            found = await asyncio.to_thread(store.get, dataset, key_text(values))
            return [found] if found is not None else []
        return await asyncio.to_thread(store.scan, dataset, limit)

    def _columns(self, name: str, store: StateStore, dataset: str) -> dict[str, str | None]:
        """A view's columns with their types: a SQL view's result schema once its query is
        built, else those of a stored row (empty when the view has none yet)."""
        runner = self.runners.get(name)
        typed = runner.result_columns() if runner is not None else None
        if typed is not None:
            return dict(typed)
        sample = store.scan(dataset, 1)
        return column_types_of_row(sample[0]) if sample else {}

    async def delete(self, name: str) -> None:
        """Stop the view, drop its datasets, checkpoints and as-of views, then forget it."""
        await self._known(name)
        await self._route(name)
        async with self._lock:
            store_url = self._record(name).definition.get("store", "sqlite")
            for runner in (self.runners.pop(name, None), self.pending.pop(name, None)):
                if runner is not None:
                    await self._retire(runner)
            for other in [n for n in self.records if n == name or n.startswith(f"{name}@")]:
                await self._forget(other)
            if "@" not in name:
                store = await self._store(store_url)
                await asyncio.to_thread(store.drop_alias, name)
                await asyncio.to_thread(
                    shutil.rmtree, self.settings.data_dir / "views" / name, True
                )
                await self.leaders.release(name)

    async def _forget(self, name: str) -> None:
        record = self.records.pop(name)
        if isinstance(record, AsOfRecord):
            store = await self._store(record.definition.get("store", "sqlite"))
            await asyncio.to_thread(store.drop, record.dataset)
        await self.definitions.delete(name)

    async def as_of(self, name: str, body: Any) -> dict[str, Any]:
        """Materialize ``name`` at a past point as the read-only view ``name@label``."""
        check_name(name)
        if not isinstance(body, dict):
            raise InvalidViewError('as-of needs {"timestamp": ms} or {"offsets": {...}}')
        await self._known(name)
        await self._route(name)
        record = self._record(name)
        if isinstance(record, AsOfRecord):
            raise InvalidViewError(f"{name} is an as-of view already")
        timestamp, offsets = body.get("timestamp"), body.get("offsets")
        point = asof.point_options(timestamp, offsets)
        label = asof.check_label(body.get("label") or asof.default_label(timestamp, offsets))
        definition = ViewDefinition.parse(name, record.definition)
        store = await self._store(definition.store)
        dataset = dataset_name(name, label=label)
        rows = await asyncio.to_thread(self._materialize, definition, point, store, dataset)
        virtual = AsOfRecord(
            f"{name}@{label}",
            name,
            definition.to_json(),
            dataset,
            {"timestamp": timestamp} if timestamp is not None else {"offsets": offsets},
            rows,
            int(time.time() * 1000),
        )
        async with self._lock:
            await self._save(virtual)
        return await self.status(f"{name}@{label}")

    def _materialize(
        self, definition: ViewDefinition, point: dict[str, str], store: StateStore, dataset: str
    ) -> int:
        try:
            roots = self.settings.views_python_dirs
            rows = asof.rows_at(
                self._spark(), definition, self.url, point, roots=roots, token=self._token
            )
        except ViewError:
            raise
        except Exception as e:
            raise InvalidViewError(f"cannot rebuild {definition.name} at that point: {e}") from None
        upserts = {key_text([r[k] for k in definition.key]): r for r in rows}
        store.drop(dataset)
        store.commit(dataset, 0, {}, upserts)
        return len(upserts)
