"""A view's SQL is parsed and checked, never executed (issue 22): against the shared Spark
session, every command, file relation, other table, file- or JVM-reaching function and
second statement is refused naming the construct, while ordinary queries pass and are then
analysed (column binding) without running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from magnetar.views.errors import InvalidViewError
from magnetar.views.session import WALLS, bind_sql
from magnetar.views.sqlcheck import parse_view_sql

REFUSED: list[tuple[str, str]] = [
    ("CREATE TABLE t (a INT)", "CREATE TABLE"),
    ("CREATE TABLE t AS SELECT * FROM events", "CREATE TABLE"),
    ("DROP TABLE events", "DROP TABLE"),
    ("SET spark.sql.runSQLOnFiles=true", "SET"),
    ("ADD JAR /tmp/x.jar", "ADD JAR"),
    ("ADD ARCHIVE /tmp/x.zip", "ADD ARCHIVE"),
    ("CACHE TABLE events", "CACHE TABLE"),
    ("UNCACHE TABLE events", "UNCACHE TABLE"),
    ("REFRESH TABLE events", "REFRESH TABLE"),
    ("CALL cat.sys.proc()", "CALL"),
    ("EXPLAIN SELECT * FROM events", "EXPLAIN"),
    ("DESCRIBE events", "DESCRIBE"),
    ("SHOW TABLES", "SHOW TABLES"),
    ("USE other", "USE"),
    ("INSERT INTO t SELECT * FROM events", "INSERT"),
    ("CREATE TEMPORARY FUNCTION f AS 'com.example.F'", "CREATE FUNCTION"),
    ("CREATE TEMPORARY VIEW v AS SELECT * FROM events", "CREATE VIEW"),
    ("EXECUTE IMMEDIATE 'DROP TABLE events'", "EXECUTE IMMEDIATE"),
    ("SELECT * FROM read_files('/etc')", "read_files"),
    ("SELECT * FROM parquet.`/x`", "parquet.`/x`"),
    ("SELECT * FROM events JOIN json.`/etc/passwd` ON true", "json.`/etc/passwd`"),
    ("SELECT reflect('java.lang.System', 'getenv', 'HOME') FROM events", "reflect"),
    ("SELECT java_method('java.lang.Runtime', 'getRuntime') FROM events", "java_method"),
    ("SELECT try_reflect('java.lang.System', 'exit', 0) FROM events", "try_reflect"),
    ("SELECT input_file_name() FROM events", "input_file_name"),
    ("SELECT builtin.reflect('a', 'b') FROM events", "reflect"),
    ("SELECT cat.db.f(key) FROM events", "cat.db.f"),
    ("SELECT * FROM events; DROP TABLE events", "second statement"),
    ("SELECT ';' AS s FROM events; SELECT 2", "second statement"),
    ("SELECT * FROM other", "it reads other"),
    ("SELECT * FROM spark_catalog.default.events", "spark_catalog.default.events"),
    ("SELECT * FROM events WHERE key IN (SELECT key FROM other)", "it reads other"),
    ("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM events) SELECT * FROM a", "it reads b"),
    ("SELECT * FROM events VERSION AS OF 1", "time travel"),
    ("SELECT * FROM STREAM events", "STREAM"),
    ("SELECT * FROM IDENTIFIER('ev' || 'ents')", "IDENTIFIER"),
    # functions hidden in places a plan keeps apart from its expressions
    ("SELECT sum(offset) OVER w FROM events WINDOW w AS (PARTITION BY reflect('a'))", "reflect"),
    ("SELECT * FROM events LATERAL VIEW java_method('a', 'b') t AS v", "java_method"),
    ("SELECT /*+ REPARTITION(reflect('a', 'b')) */ * FROM events", "reflect"),
    ("SELECT * FROM VALUES (1, reflect('a', 'b')) AS t(x, y)", "reflect"),
    ("SELECT (SELECT max(v) FROM (SELECT * FROM text.`/etc/hostname`)) FROM events", "text."),
    ("SELEC key FROM events", "invalid SQL"),
]

ALLOWED = [
    "SELECT data.user AS user, count(*) AS n FROM events GROUP BY data.user HAVING n > 1",
    "SELECT key, sum(offset) OVER (PARTITION BY key ORDER BY offset) AS s FROM events",
    "SELECT key, sum(offset) OVER w AS s FROM events WINDOW w AS (PARTITION BY key)",
    "WITH a AS (SELECT * FROM events), b AS (SELECT * FROM a) SELECT key FROM b",
    "WITH events AS (SELECT * FROM events WHERE offset > 3) SELECT * FROM events",
    "SELECT key FROM events UNION ALL SELECT key FROM EVENTS",
    "SELECT * FROM events e JOIN (SELECT 1 AS k) t ON e.partition = t.k",
    "SELECT key, (SELECT max(offset) FROM events) AS m FROM events WHERE EXISTS "
    "(SELECT 1 FROM events)",
    "SELECT * FROM events LATERAL VIEW explode(array(1, 2)) t AS v",
    "SELECT * FROM range(3)",
    "SELECT * FROM VALUES (1, 'a') AS t(id, name)",
    "SELECT system.builtin.upper(key) AS k FROM events",
    "FROM events |> WHERE key = 'a' |> AGGREGATE count(*) AS n GROUP BY key",
    "SELECT * FROM events QUALIFY row_number() OVER (PARTITION BY key ORDER BY offset) = 1",
    "SELECT get_json_object(CAST(value AS STRING), '$.user') AS user FROM events;",
]


@pytest.mark.parametrize(("sql", "named"), REFUSED, ids=[s for s, _ in REFUSED])
def test_refused_constructs_are_named(spark: Any, sql: str, named: str) -> None:
    with pytest.raises(InvalidViewError) as refused:
        parse_view_sql(spark, sql)
    assert named in str(refused.value)
    assert refused.value.http_status == 400


@pytest.mark.parametrize("sql", ALLOWED)
def test_queries_pass(spark: Any, sql: str) -> None:
    parse_view_sql(spark, sql)


def test_a_refused_command_is_not_executed(spark: Any, tmp_path: Path) -> None:
    """The issue's first attack: the statement used to run while it was being checked."""
    target = tmp_path / "outside"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    sql = f"INSERT OVERWRITE DIRECTORY 'file://{target}' USING text SELECT 'owned' AS k"
    with pytest.raises(InvalidViewError, match="INSERT OVERWRITE DIRECTORY"):
        parse_view_sql(spark, sql)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    assert (target / "keep.txt").read_text() == "mine"


def test_a_checked_query_is_analysed_not_run(spark: Any) -> None:
    events = spark.createDataFrame([("a", 1), ("b", 2)], "key string, offset long")
    sql = "SELECT key, count(*) AS n FROM events GROUP BY key"
    frame = bind_sql(spark, events, parse_view_sql(spark, sql))
    assert frame.columns == ["key", "n"]
    assert sorted(tuple(r) for r in frame.collect()) == [("a", 1), ("b", 1)]
    with pytest.raises(InvalidViewError, match=r"invalid SQL.*nope"):
        bind_sql(spark, events, parse_view_sql(spark, "SELECT nope FROM events"))
    assert not spark.catalog.tableExists("events"), "the binding's temp view is gone"


def test_the_session_refuses_sql_on_files_as_a_second_wall(spark: Any, tmp_path: Path) -> None:
    assert WALLS == {"spark.sql.runSQLOnFiles": "false"}
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    with pytest.raises(Exception, match=r"(?i)table or view.*cannot be found|not found"):
        spark.sql(f"SELECT * FROM text.`file://{secret}`").collect()
