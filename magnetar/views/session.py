"""The Spark side of views: one shared SparkSession, started lazily, and SQL binding.

Spark is heavy (a JVM, ~15 s to start), so nothing here runs at import: the standalone
starts Spark on its first view, in a worker thread, never on the event loop. Every view
shares the session; a view's SQL sees its own events as the table ``events`` because the
binding (temp view + analysis) happens under :data:`BIND_LOCK`. The SQL is parsed and
checked (:mod:`magnetar.views.sqlcheck`) before it is analysed, never run as a statement.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from magnetar.views.errors import InvalidViewError
from magnetar.views.sqlcheck import analysed_frame, parse_view_sql

BIND_LOCK = threading.Lock()
# Spark 4.3's Python streaming source (PythonStreamingSourceRunner.init) writes its worker
# settings into the environment map of the source's PythonFunction, which every query of the
# process shares, without a lock. Two queries initialising their sources at once (views
# resuming together after a restart) can corrupt that Scala HashMap for good: every later
# task of every view fails "Task not serializable" (caused by "Illegal size 5 of collection,
# expected 7"). So streaming queries start one at a time, each until its sources are made.
SOURCES_LOCK = threading.Lock()
SOURCES_TIMEOUT_S = 300.0  # a source that takes longer to initialise frees the turn anyway
INITIALIZING = ("Initializing StreamExecution", "Initializing sources")  # Spark's statuses
_START_LOCK = threading.Lock()
_session: Any = None
# Settings no ``conf`` overrides: a second wall behind the SQL check (sqlcheck), so a file
# relation that slipped through (``parquet.`/path` ``) is still not read.
WALLS = {"spark.sql.runSQLOnFiles": "false"}


def spark_session(master: str, conf: Mapping[str, str] | None = None) -> Any:
    """The process's SparkSession, created on first use with ``master`` and ``conf``."""
    global _session
    with _START_LOCK:
        if _session is None or _session.sparkContext._jsc is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            try:
                from pyspark.sql import SparkSession
            except ImportError:
                raise InvalidViewError(
                    "views need pyspark: pip install 'magnetar[spark]'"
                ) from None
            builder = SparkSession.builder.master(master).appName("magnetar-views")
            settings = {
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.noDataMicroBatches.enabled": "false",
                "spark.sql.streaming.stateStore.stateSchemaCheck": "false",
                **(conf or {}),
                **WALLS,
            }
            for k, v in settings.items():
                builder = builder.config(k, v)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel("ERROR")
        return _session


def start_streaming(writer: Any, *, timeout: float = SOURCES_TIMEOUT_S) -> Any:
    """``writer.start()``, the query returned once its sources are initialised (or it
    stopped), never while another query of this process initialises its own (see
    :data:`SOURCES_LOCK`)."""
    with SOURCES_LOCK:
        query = writer.start()
        deadline = time.monotonic() + timeout
        while query.isActive and time.monotonic() < deadline:
            if query.status["message"] not in INITIALIZING:
                break
            time.sleep(0.02)
        return query


def source_reader(
    spark: Any, url: str, topics: Sequence[str], *, streaming: bool, token: str | None = None
) -> Any:
    """The magnetar source over ``topics``; ``token`` authenticates its plan requests on a
    node with authentication on (the node's own client credential, for views)."""
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("magnetar").option("url", url).option("topics", ",".join(topics))
    return reader.option("token", token) if token else reader


def bind_sql(spark: Any, events: Any, plan: Any) -> Any:
    """The checked ``plan`` (see :func:`~magnetar.views.sqlcheck.parse_view_sql`) analysed
    with ``events`` as the table ``events``; InvalidViewError if Spark refuses it (the message
    is Spark's). Analysis binds names and runs nothing."""
    with BIND_LOCK:
        events.createOrReplaceTempView("events")
        try:
            return analysed_frame(spark, plan)
        except Exception as e:  # AnalysisException, ...: a column or function that is not there
            raise InvalidViewError(f"invalid SQL: {first_line(e)}") from None
        finally:
            spark.catalog.dropTempView("events")


def bind_view_sql(spark: Any, reader: Any, sql: str) -> tuple[Any, list[str]]:
    """``sql`` over the events ``reader`` loads, reading only the columns it uses; returns
    the bound frame and those columns. The SQL is parsed and checked first (one query that
    reads ``events``, nothing else: InvalidViewError naming what is refused); it is never
    executed here."""
    plan = parse_view_sql(spark, sql)
    events = reader.load()
    out = bind_sql(spark, events, plan)
    used = used_columns(out)
    if used is None or len(used) == len(events.columns):
        return out, list(events.columns)
    # "SELECT key, count(*) ... GROUP BY key" ships one column, not ten (and ``data``, a
    # JSON decode per event, is only built when the SQL reads it).
    from pyspark.sql.types import StructType

    keep = [f for f in events.schema.fields if f.name in (used or ["offset"])]
    narrow = reader.schema(StructType(keep)).load()
    # parsed again: an unresolved plan object is never analysed twice (analysis tags the
    # nodes it visits, and the first frame's plan may share them)
    return bind_sql(spark, narrow, parse_view_sql(spark, sql)), list(narrow.columns)


def used_columns(frame: Any) -> list[str] | None:
    """The source columns ``frame``'s analysed plan reads, in source order; None when the
    plan holds something other than one source relation (then every column is kept).

    Python data sources get no column pruning from Spark, so a view narrows its source to
    these (``.schema(...)``): a column never read is never built nor shipped to the JVM.
    """
    plan = frame._jdf.queryExecution().analyzed()
    referenced: set[int] = set()
    leaves: list[Any] = []
    pending = [plan]
    while pending:
        node = pending.pop()
        children = node.children()
        if children.size() == 0:
            leaves.append(node)
        refs = node.references().iterator()
        while refs.hasNext():
            referenced.add(refs.next().exprId().id())
        pending.extend(children.apply(i) for i in range(children.size()))
    if len(leaves) != 1:
        return None
    output = leaves[0].output()
    attrs = [output.apply(i) for i in range(output.size())]
    return [a.name() for a in attrs if a.exprId().id() in referenced]


def first_line(error: BaseException) -> str:
    """The useful part of a Spark exception (its first line, without the JVM stack)."""
    return _first(str(error)) or type(error).__name__


def _first(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:2000] if lines else ""


def root_cause(error: BaseException) -> str | None:
    """The innermost JVM cause of a Spark exception ("class: message", the message whole:
    a serialization failure's names the object path), which Spark's own message leaves out
    ("Task not serializable" says nothing of what could not be); None when ``error`` did
    not come from the JVM."""
    cause, found = getattr(error, "_origin", None), None
    try:
        for _ in range(16):  # a cause chain is short; a cycle must not hang us
            cause = cause.getCause() if cause is not None else None
            if cause is None:
                break
            found = f"{cause.getClass().getName()}: {cause.getMessage()}"
    except Exception:  # the gateway is gone (Spark stopping): keep what was found
        pass
    return found


def spark_error(error: BaseException, cause: str | None) -> str:
    """:func:`first_line` of a Spark exception, with the first line of its root ``cause``
    (see :func:`root_cause`) when the JVM gave one."""
    line = first_line(error)
    return f"{line} (caused by {_first(cause)})" if cause else line
