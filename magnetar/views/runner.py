"""One view version running as ONE Spark structured streaming query: the history first
(read straight from segments and offloaded Parquet by the ``magnetar`` source, from the
earliest offset), then the live tail, with no hand-over in between.

Each micro-batch goes through ``foreachBatch``: SQL views upsert the rows Spark's update
mode emits; Python views fold the batch's events per key onto the stored state. The changes
and the batch's source offsets commit in one store transaction (exactly once: a batch that
Spark replays after a crash carries a batch id the store already holds, and is skipped).

Durable: the Spark checkpoint (``checkpoint/``: offsets of each planned batch, SQL
aggregation state) and the store. A failure leaves the store at the last committed batch;
the view goes FAILED with the error and the offsets it stopped at.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.views.errors import (
    InvalidViewError,
    TransformError,
    UnparsedMessageError,
    ViewError,
    ViewFencedError,
)
from magnetar.views.model import Offsets, Position, ViewDefinition, ViewState, key_text
from magnetar.views.session import (
    bind_view_sql,
    first_line,
    root_cause,
    source_reader,
    spark_error,
    start_streaming,
)
from magnetar.views.stores.base import StateStore
from magnetar.views.transform import TOP_LEVEL, FoldResult, events_of, fold, load_function
from magnetar.views.unparsed import FAIL, Unparsed, UnparsedLog, failure_message, in_range, in_rows

log = logging.getLogger(__name__)
_BEHIND = (ViewState.BOOTSTRAPPING, ViewState.CATCHING_UP)  # running, not yet LIVE


@dataclass(frozen=True)
class RunOptions:
    url: str  # the Magnetar HTTP URL the source plans reads from
    max_batch_events: int
    trigger_ms: int
    python_path: tuple[Path, ...] = ()  # where Python views may be imported from (resolved)
    token: str | None = None  # the node's own client credential (authentication on)


def offsets_of_batch(checkpoint: Path, batch_id: int) -> Offsets:
    """The source end offsets Spark planned for ``batch_id`` (its offset log, written before
    the batch runs): the exact position the batch's state reflects."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    parsed: Offsets = json.loads(lines[-1])
    return parsed


MARKER = "magnetar.json"  # in the checkpoint: {"base": store batch id of Spark's batch 0}
# plan nodes whose state lives in Spark's checkpoint (not in the view's store)
_STATEFUL = re.compile(
    r"^[\s:+|~-]*(Aggregate|Deduplicate\w*|Join|Window|Distinct|Expand|FlatMapGroupsWithState"
    r"|TransformWithState\w*|StreamingDeduplicate\w*)\b",
    re.M,
)


def stateful(frame: Any) -> bool:
    """Whether ``frame``'s streaming query keeps state in its checkpoint (aggregations,
    deduplication, joins, windows): such a query cannot resume from offsets alone."""
    try:
        plan = frame._jdf.queryExecution().analyzed().toString()
    except Exception:  # no plan to read: assume the worst (a rebuild, never a wrong total)
        return True
    return _STATEFUL.search(plan) is not None


def python_batch_limit(max_batch_events: int) -> int:
    """Events per micro-batch of a Python view: its batch is folded in the server's memory
    (a dict per event), so a tenth of a SQL view's, at most 100k."""
    return max(1, min(max_batch_events // 10, 100_000))


def reached(position: Offsets, target: Offsets) -> bool:
    return all(
        position.get(t, {}).get(p, 0) >= o for t, parts in target.items() for p, o in parts.items()
    )


MAX_RESTARTS = 3  # a query that dies inside Spark is started again this often
RESTART_PAUSE_S = 2.0  # times the restart's number


class ViewRunner:
    """A view version's streaming query and what it has done; thread-safe status."""

    def __init__(
        self,
        definition: ViewDefinition,
        version: int,
        dataset: str,
        store: StateStore,
        checkpoint: Path,
        bootstrap: dict[str, Offsets],
        on_change: Callable[[ViewRunner], None],
    ) -> None:
        self.definition = definition
        self.version = version
        self.dataset = dataset
        self.store = store
        self.checkpoint = checkpoint
        self.start_offsets = bootstrap["start"]
        self.created_target = bootstrap["target"]  # the sources' end offsets at creation
        # what it must have applied to be LIVE: the creation high-water mark, raised by
        # aim() to the end offsets when the query (re)starts
        self.target = bootstrap["target"]
        self.on_change = on_change
        self.state = ViewState.CREATED
        self.error: str | None = None
        self.failed_at: dict[str, Any] | None = None
        self.position = store.position(dataset) or Position()
        self.query: Any = None
        self._frame: Any = None
        self._tracker: Any = None  # Spark's status tracker: progress inside a batch
        self._share = (-1, 0.0)  # (batch id, share of its read tasks done)
        self.columns: list[str] = []  # the source columns the query reads
        self.unparsed_log = UnparsedLog(checkpoint / "unparsed")
        self._url = ""
        self._stopping = False
        self._lock = threading.Lock()
        self._spark: Any = None
        self._opts: RunOptions | None = None
        self.restarts = 0  # times its query died inside Spark and was started again
        # leadership (several brokers): the epoch this runner writes with, the store batch id
        # of Spark's batch 0 in its checkpoint, and where a fresh checkpoint starts reading
        self.epoch = 0
        self.base = 0
        self.starting: str | Offsets = "earliest"
        self.fenced = False  # another broker leads the view now: this runner stopped

    # -- taking the lead ------------------------------------------------------------------

    def adopt(self, epoch: int, spark: Any, opts: RunOptions) -> bool:
        """Lead this version at ``epoch`` (before :meth:`start`): fence the store, so no older
        leader commits again, then choose where the query starts. The checkpoint is kept
        when it is this store's (its batch at the store's position planned exactly the
        store's offsets: the same broker restarting); otherwise Spark's files are cleared
        and the query starts at the store's offsets, its batch ids continuing the store's.
        False when that cannot be done: a query whose state lived in a checkpoint this
        broker lacks (an aggregation led elsewhere), which must be built again."""
        stored = self.store.fence(self.dataset, epoch)
        self.epoch, self.position = epoch, stored or Position()
        base = self._marker_base()
        if stored is not None and self._checkpoint_holds(stored, base):
            self.base = base
            log.info(
                "view %s: leads at epoch %d from its checkpoint (batch %d)",
                self.dataset, epoch, stored.batch_id,
            )  # fmt: skip
            return True
        sql = self.definition.sql is not None
        if stored is not None and sql and stateful(self.prepare(spark, opts)):
            log.warning(
                "view %s: leads at epoch %d, but its Spark state (an aggregation's) stayed "
                "with the broker that led it before",
                self.dataset, epoch,
            )  # fmt: skip
            return False
        self._clear_checkpoint()
        self.base = stored.batch_id + 1 if stored is not None else 0
        starting = stored.offsets if stored is not None else "earliest"
        if starting != self.starting:
            self.starting, self._frame = starting, None  # built again from there
        self._write_marker()
        if stored is not None:
            log.warning(
                "view %s: resumes at epoch %d from the store's offsets (batch %d)",
                self.dataset, epoch, stored.batch_id,
            )  # fmt: skip
        return True

    def _marker_base(self) -> int:
        try:
            return int(json.loads((self.checkpoint / MARKER).read_text())["base"])
        except FileNotFoundError:
            return 0  # a checkpoint from before leader epochs: Spark's ids are the store's
        except (OSError, ValueError, KeyError, TypeError):
            return -1  # unreadable: never trusted

    def _checkpoint_holds(self, stored: Position, base: int) -> bool:
        batch = stored.batch_id - base
        if base < 0 or batch < 0:
            return False
        try:
            return offsets_of_batch(self.checkpoint, batch) == stored.offsets
        except (OSError, ValueError):
            return False

    def _clear_checkpoint(self) -> None:
        """Remove Spark's files; the unparsed counts beside them stay."""
        if not self.checkpoint.is_dir():
            return
        for entry in self.checkpoint.iterdir():
            if entry.name != "unparsed":
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()

    def _write_marker(self) -> None:
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        (self.checkpoint / MARKER).write_text(json.dumps({"base": self.base}))

    # -- building and starting ----------------------------------------------------------

    def prepare(self, spark: Any, opts: RunOptions) -> Any:
        """The streaming DataFrame whose rows the batches receive; InvalidViewError for a
        bad definition (checked before anything starts)."""
        if self._frame is not None:
            return self._frame
        self._frame = self._build(spark, opts)
        self._tracker = spark.sparkContext.statusTracker()
        self._spark, self._opts = spark, opts
        return self._frame

    def _build(self, spark: Any, opts: RunOptions) -> Any:
        d = self.definition
        self._url = opts.url
        limit = opts.max_batch_events if d.sql else python_batch_limit(opts.max_batch_events)
        events_reader = (
            source_reader(spark, opts.url, d.source, streaming=True, token=opts.token)
            .option("startingOffsets", _offsets_option(self.starting))
            .option("maxOffsetsPerTrigger", str(limit))
        )
        if d.sql is None:
            assert d.python is not None
            events = events_reader.load()
            self.columns = list(events.columns)
            self._apply = load_function(d.python, roots=opts.python_path)
            check_python_key(events.columns, events.schema, d.key)
            return events
        out, self.columns = bind_view_sql(spark, events_reader, d.sql)
        missing = [k for k in d.key if k not in out.columns]
        if missing:
            raise InvalidViewError(
                f"key column(s) {missing} are not in the SQL result (its columns: {out.columns})"
            )
        return out

    def aim(self, ends: Offsets) -> None:
        """Before :meth:`start`: LIVE will mean having applied everything up to ``ends``
        (the sources' end offsets now) too, so a view restarted behind catches up first.
        Partitions that did not exist at creation are not waited for."""
        self.target = {
            topic: {p: max(end, ends.get(topic, {}).get(p, end)) for p, end in parts.items()}
            for topic, parts in self.created_target.items()
        }

    def start(self, frame: Any, opts: RunOptions) -> None:
        """Start the query (returns at once; batches run on Spark's threads)."""
        self.query = self._start_query(frame, opts)
        self._set_running()
        threading.Thread(target=self._watch, name=f"view-{self.dataset}", daemon=True).start()

    def _start_query(self, frame: Any, opts: RunOptions) -> Any:
        writer = (
            frame.writeStream.queryName(f"view_{self.dataset}")
            .outputMode("update")
            .option("checkpointLocation", str(self.checkpoint))
            .foreachBatch(self._batch)
        )
        if opts.trigger_ms > 0:
            writer = writer.trigger(processingTime=f"{opts.trigger_ms} milliseconds")
        try:
            return start_streaming(writer)
        except Exception as e:  # e.g. an operation streaming queries cannot run
            raise InvalidViewError(f"invalid SQL for a streaming view: {first_line(e)}") from None

    def _set_running(self) -> None:
        with self._lock:
            self.state = self._phase(self.position.offsets)
        self.on_change(self)

    def _phase(self, at: Offsets) -> ViewState:
        """Where a running query stands with its state at ``at``."""
        if reached(at, self.target):
            return ViewState.LIVE
        if reached(at, self.created_target):
            return ViewState.CATCHING_UP
        return ViewState.BOOTSTRAPPING

    def _watch(self) -> None:
        while True:
            try:
                self.query.awaitTermination()
            except Exception as e:  # the query died: keep the first, most precise error
                if self._restart(e):
                    continue
                cause = root_cause(e)
                if cause:  # whole: Spark's own message may span lines (serialization path)
                    log.warning("view %s: its query died in Spark: %s", self.dataset, cause)
                self._fail(spark_error(e, cause), None)
                return
            break
        with self._lock:
            if self.state not in (ViewState.FAILED,):
                self.state = ViewState.STOPPED
        self.on_change(self)

    def _restart(self, error: Exception) -> bool:
        """Start the query again from its checkpoint after it died inside Spark (not in this
        view's own batch code, which fails the view at once: data errors do not go away),
        at most MAX_RESTARTS times, with a growing pause. True when it runs again. The
        store skips batches it already holds, so a restart applies nothing twice."""
        with self._lock:
            if self.state == ViewState.FAILED or self._stopping or self._opts is None:
                return False
            if self.restarts >= MAX_RESTARTS:
                return False
            self.restarts += 1
        cause = root_cause(error)  # asked of the JVM once, for both lines
        log.warning(
            "view %s: its query died in Spark (%s); starting it again from its checkpoint "
            "(restart %d of at most %d)\n%s", self.dataset, spark_error(error, cause),
            self.restarts, MAX_RESTARTS, cause or "",
        )  # fmt: skip
        time.sleep(RESTART_PAUSE_S * self.restarts)
        try:
            self._frame = None  # a fresh plan: the old one may be what failed
            frame = self.prepare(self._spark, self._opts)
            if self._stopping:
                return False
            self.query = self._start_query(frame, self._opts)
        except Exception as e:
            log.warning("view %s: restart failed: %s", self.dataset, first_line(e))
            return False
        return True

    def stop(self) -> None:
        """Stop the query; the store keeps its last commit (a later start resumes there)."""
        self._stopping = True
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as e:  # the JVM may be gone already at shutdown
                log.warning("stopping view %s: %s", self.dataset, first_line(e))
        with self._lock:
            if self.state != ViewState.FAILED:
                self.state = ViewState.STOPPED

    # -- one micro-batch ------------------------------------------------------------------

    def _batch(self, frame: Any, spark_batch: int) -> None:
        batch_id = self.base + spark_batch  # the store's numbering (see adopt)
        try:
            offsets = offsets_of_batch(self.checkpoint, spark_batch)
            stored = self.store.position(self.dataset)
            if stored is not None and batch_id <= stored.batch_id:
                log.info("view %s: batch %d already committed, skipped", self.dataset, batch_id)
                return
            table = frame.toArrow()
            self._count_unparsed(table, batch_id, stored, offsets)
            changes = self._changes(table)
            self.store.commit(
                self.dataset, batch_id, offsets, changes.upserts, changes.deletes, self.epoch
            )
        except ViewFencedError as e:
            self._fence(str(e))
            raise
        except TransformError as e:
            self._fail(str(e), e.at)
            raise
        except ViewError as e:
            self._fail(str(e), None)
            raise
        except Exception as e:
            self._fail(f"batch {batch_id} failed: {first_line(e)}", None)
            raise
        self._advance(Position(batch_id, offsets, int(time.time() * 1000), self.epoch))

    def _fence(self, why: str) -> None:
        """A newer leader fenced the store: stop here, changing no shared record."""
        with self._lock:
            self.fenced, self._stopping = True, True
            if self.state != ViewState.FAILED:
                self.state = ViewState.STOPPED
        log.warning("view %s: another broker leads it now (%s); its query stops", self.dataset, why)

    def _count_unparsed(
        self, table: Any, batch_id: int, stored: Position | None, offsets: Offsets
    ) -> None:
        """Count (or, with ``"onUnparsed": "fail"``, refuse) the batch's messages whose value
        did not parse; kept before the store commits the batch (see :mod:`.unparsed`)."""
        if "data" not in self.columns:
            return  # the view never reads ``data``: nothing became null for it
        if self.definition.sql is None:
            found = in_rows(table)
        else:  # the batch holds the query's result rows: read the batch's range again
            begin = stored.offsets if stored is not None else self.start_offsets
            token = self._opts.token if self._opts is not None else None
            found = in_range(self._url, self.definition.source, begin, offsets, token)
        if found.count and self.definition.on_unparsed == FAIL:
            raise UnparsedMessageError(failure_message(found), at=found.first)
        self.unparsed_log.record(batch_id, found, stored.batch_id if stored else -1)

    def unparsed(self) -> Unparsed:
        """The messages applied so far whose value did not parse (committed batches only)."""
        try:
            return self.unparsed_log.total(self.position.batch_id)
        except (OSError, ValueError) as e:  # a damaged file: say so, do not fail the status
            log.warning("view %s: cannot read its unparsed counts: %s", self.dataset, e)
            return Unparsed()

    def _changes(self, table: Any) -> FoldResult:
        d = self.definition
        if d.sql is not None:
            rows = table.to_pylist()
            return FoldResult({key_text([r[k] for k in d.key]): r for r in rows})
        return fold(
            events_of(table),
            d.key,
            self._apply,
            lambda keys: self.store.get_many(self.dataset, keys),
            d.python or "transformation",
        )

    def _advance(self, position: Position) -> None:
        with self._lock:
            self.position = position
            became_live = False
            if self.state in _BEHIND:
                self.state = self._phase(position.offsets)
                became_live = self.state == ViewState.LIVE
        if became_live:
            self.on_change(self)

    def _fail(self, error: str, at: dict[str, Any] | None) -> None:
        with self._lock:
            if self.state == ViewState.FAILED or self._stopping:
                return
            self.state = ViewState.FAILED
            self.error = error
            self.failed_at = at or {"offsets": self.position.offsets}
        log.error("view %s failed: %s", self.dataset, error)
        self.on_change(self)

    # -- status ----------------------------------------------------------------------------

    def result_columns(self) -> dict[str, str] | None:
        """A SQL view's result columns and their Spark types once its query is built; None
        before, and for a Python view (its rows are whatever the function returns)."""
        frame = self._frame
        if self.definition.sql is None or frame is None:
            return None
        try:
            return {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        except Exception:  # the JVM is going away (shutdown): the rows tell the types then
            return None

    def last_batch(self) -> dict[str, Any] | None:
        """Spark's timings of the last micro-batch (ms per phase), when the query runs."""
        try:
            progress = self.query.lastProgress if self.query is not None else None
        except Exception:  # the JVM may be gone (shutdown): no timings then
            return None
        return dict(progress["durationMs"]) if progress else None

    def progress(self) -> float:
        """The share of the history (start → :attr:`target`: the high-water mark at creation,
        or the end offsets at the last restart) applied, counting the batch Spark runs now by
        the share of its read tasks done."""
        start = sum(o for parts in self.start_offsets.values() for o in parts.values())
        total = sum(o for parts in self.target.values() for o in parts.values()) - start
        if total <= 0:
            return 1.0
        position = self.position
        running = self._running() if self.state in _BEHIND else None
        done = 0.0
        for t, parts in self.target.items():
            for p, end in parts.items():
                first = self.start_offsets[t][p]
                at = min(position.offsets.get(t, {}).get(p, first), end)
                done += at - first
                if running is not None:
                    ahead = min(running[0].get(t, {}).get(p, at), end)
                    done += running[1] * max(0, ahead - at)
        return round(max(0.0, min(1.0, done / total)), 4)

    def _running(self) -> tuple[Offsets, float] | None:
        """The batch being computed: the end offsets Spark planned for it and the share of
        its read tasks finished (from the query's jobs in Spark's status tracker; the
        highest share seen for the batch, as later jobs of a batch start from zero)."""
        query, tracker = self.query, self._tracker
        if query is None or tracker is None:
            return None
        batch = self.position.batch_id - self.base + 1  # Spark's numbering
        try:
            ends = offsets_of_batch(self.checkpoint, batch)
            active = set(tracker.getActiveJobsIds())
            jobs = [j for j in tracker.getJobIdsForGroup(str(query.runId)) if j in active]
            job = tracker.getJobInfo(max(jobs)) if jobs else None
            stage = tracker.getStageInfo(min(job.stageIds)) if job and job.stageIds else None
        except Exception:  # not planned yet, or the JVM is going away: no in-flight share
            return None
        share = stage.numCompletedTasks / stage.numTasks if stage and stage.numTasks > 0 else 0.0
        seen_batch, seen = self._share
        if seen_batch == batch:
            share = max(share, seen)
        self._share = (batch, share)
        return ends, share


def _offsets_option(starting: str | Offsets) -> str:
    return starting if isinstance(starting, str) else json.dumps(starting, sort_keys=True)


def check_python_key(columns: list[str], schema: Any, key: tuple[str, ...]) -> None:
    """Key columns of a Python view must name a column or a field of ``data``; when the
    topic has no schema (no ``data``), fields are only known at run time."""
    fields = set(schema["data"].dataType.names) if "data" in columns else None
    for name in key:
        field = name[5:] if name.startswith("data.") else name
        if name in TOP_LEVEL or fields is None or field in fields:
            continue
        raise InvalidViewError(
            f"key column {name!r} is neither a column of events nor a field of its data "
            f"(fields: {sorted(fields)})"
        )
