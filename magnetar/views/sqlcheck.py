"""What a view's SQL may contain, checked on Spark's parsed plan before anything runs.

``spark.sql(text)`` runs a command at once (``INSERT OVERWRITE DIRECTORY``, ``ADD JAR``,
``SET``, ...), so a view's SQL is never handed to it: :func:`parse_view_sql` parses the text
with the session's parser (nothing executes), walks the unresolved plan and refuses
anything but one query that reads the table ``events``. Only then is the parsed plan
analysed (column binding), which resolves names but reads and writes nothing.

The rules are an allow-list where the language is open-ended (plan nodes: query operators
only; relations: ``events`` and the query's own CTE names; table functions: generators and
``range``) and a deny-list where it is not (built-in functions that reach the JVM or the
server's files). The Spark session adds a second wall (``spark.sql.runSQLOnFiles=false``,
see :mod:`magnetar.views.session`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from magnetar.views.errors import InvalidViewError

EVENTS = "events"  # the table a view's SQL reads: its source's events

# Logical plan nodes a query parses to; anything else (commands, time travel, STREAM, ...)
# is refused.
QUERY_NODES = frozenset(
    {
        "Aggregate",
        "Distinct",
        "Except",
        "Filter",
        "Generate",
        "GlobalLimit",
        "Intersect",
        "Join",
        "LateralJoin",
        "LimitAll",
        "LocalLimit",
        "LocalRelation",
        "Offset",
        "OneRowRelation",
        "PipeOperator",
        "Pivot",
        "Project",
        "RepartitionByExpression",
        "Sample",
        "Sort",
        "SubqueryAlias",
        "Tail",
        "Union",
        "Unpivot",
        "UnresolvedHaving",
        "UnresolvedHint",
        "UnresolvedInlineTable",
        "UnresolvedQualify",
        "UnresolvedRelation",
        "UnresolvedSubqueryColumnAliases",
        "UnresolvedTVFAliases",
        "UnresolvedTableValuedFunction",
        "UnresolvedWith",
        "WithWindowDefinition",
    }
)
# Table-valued functions that only compute rows from their arguments (read_files, ... are not)
TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "inline",
        "inline_outer",
        "posexplode",
        "posexplode_outer",
        "stack",
    }
)
# Built-in functions that call into the JVM, name the server's files, or parse XML
DENIED_FUNCTIONS = frozenset(
    {
        "reflect",
        "java_method",
        "try_reflect",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "xpath",
        "xpath_boolean",
        "xpath_double",
        "xpath_float",
        "xpath_int",
        "xpath_long",
        "xpath_number",
        "xpath_short",
        "xpath_string",
    }
)
BUILTIN_PREFIXES = ((), ("builtin",), ("system", "builtin"))
# How a refused node is named to the user (else its Spark class name)
COMMANDS = {
    "InsertIntoDir": "INSERT OVERWRITE DIRECTORY",
    "InsertIntoStatement": "INSERT",
    "CreateTable": "CREATE TABLE",
    "CreateTableAsSelect": "CREATE TABLE ... AS SELECT",
    "ReplaceTable": "REPLACE TABLE",
    "ReplaceTableAsSelect": "REPLACE TABLE ... AS SELECT",
    "CreateViewCommand": "CREATE VIEW",
    "CreateView": "CREATE VIEW",
    "CreateFunctionCommand": "CREATE FUNCTION",
    "CreateFunction": "CREATE FUNCTION",
    "DropTable": "DROP TABLE",
    "DropView": "DROP VIEW",
    "DropFunction": "DROP FUNCTION",
    "DropNamespace": "DROP NAMESPACE",
    "SetCommand": "SET",
    "ResetCommand": "RESET",
    "SetVariable": "SET VAR",
    "CreateVariable": "DECLARE VARIABLE",
    "AddJarsCommand": "ADD JAR",
    "AddArchivesCommand": "ADD ARCHIVE",
    "AddFilesCommand": "ADD FILE",
    "CacheTable": "CACHE TABLE",
    "CacheTableAsSelect": "CACHE TABLE",
    "UncacheTable": "UNCACHE TABLE",
    "RefreshTable": "REFRESH TABLE",
    "RefreshResource": "REFRESH",
    "Call": "CALL",
    "ExplainCommand": "EXPLAIN",
    "SetCatalogAndNamespace": "USE",
    "DescribeRelation": "DESCRIBE",
    "ShowTables": "SHOW TABLES",
    "LoadData": "LOAD DATA",
    "DeleteFromTable": "DELETE",
    "UpdateTable": "UPDATE",
    "MergeIntoTable": "MERGE",
    "UnresolvedExecuteImmediate": "EXECUTE IMMEDIATE",
    "CompoundBody": "a SQL script (BEGIN ... END)",
    "RelationTimeTravel": "time travel (VERSION / TIMESTAMP AS OF)",
    "NamedStreamingRelation": "STREAM",
    "PlanWithUnresolvedIdentifier": "IDENTIFIER(...) of a non-constant",
}
FILE_FORMATS = frozenset(
    {"parquet", "text", "csv", "json", "orc", "avro", "binaryfile", "xml", "hive", "jdbc"}
)
MAX_NODES = 2000
ONE_QUERY = f"a view's SQL must be one query that reads the table {EVENTS}"


def parse_view_sql(spark: Any, sql: str) -> Any:
    """The unresolved logical plan of ``sql`` (a JVM object) once it is known to be one
    query reading only ``events``; InvalidViewError naming the first refused construct.
    Nothing is executed or analysed."""
    plan = _parse(spark, sql)
    check_plan(plan)
    return plan


def analysed_frame(spark: Any, plan: Any) -> Any:
    """A DataFrame of the checked ``plan``: Spark analyses it (binding names to the tables
    and columns in scope, raising AnalysisException) and runs nothing."""
    from pyspark.sql import DataFrame

    jdf = spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan)
    return DataFrame(jdf, spark)


def _parse(spark: Any, sql: str) -> Any:
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        return parser.parsePlan(sql)
    except Exception as e:  # ParseException: say so, and whether it is a second statement
        second = _second_statement(parser, sql)
        if second is not None:
            raise InvalidViewError(
                f"{ONE_QUERY}: a second statement follows ';' at character {second} "
                "(one statement only)"
            ) from None
        raise InvalidViewError(f"invalid SQL: {_first_line(e)}") from None


def _second_statement(parser: Any, sql: str) -> int | None:
    """Where a second statement starts when ``sql`` is a valid statement, ';', more."""
    at = sql.find(";")
    for _ in range(20):  # a ';' inside a literal makes the prefix unparsable: try the next
        if at < 0:
            return None
        if sql[at + 1 :].strip(" \t\r\n;"):
            try:
                parser.parsePlan(sql[:at])
                return at + 1
            except Exception:  # the prefix is no statement: this ';' sits inside one
                pass
        at = sql.find(";", at + 1)
    return None


def check_plan(plan: Any) -> None:
    """Raise InvalidViewError unless every node of ``plan`` is allowed (see module doc)."""
    loader = plan.getClass().getClassLoader()
    subquery = loader.loadClass("org.apache.spark.sql.catalyst.expressions.SubqueryExpression")
    for node, scope in _walk(plan, frozenset({EVENTS}), subquery):
        name = node.getClass().getSimpleName()
        if name not in QUERY_NODES:
            label = COMMANDS.get(name, name)
            raise InvalidViewError(f"{ONE_QUERY}: {label} ({name}) is not allowed")
        if name == "UnresolvedRelation":
            _check_relation(_strings(node.multipartIdentifier()), scope)
        elif name == "UnresolvedTableValuedFunction":
            _check_table_function(_strings(node.name()))
        for expression in _expressions(node):
            _check_expressions(expression)


def _expressions(node: Any) -> list[Any]:
    """A node's expressions, with those Spark keeps outside ``expressions()`` (the window
    specifications of a WINDOW clause)."""
    found = _seq(node.expressions())
    if node.getClass().getSimpleName() == "WithWindowDefinition":
        found += _seq(node.windowDefinitions().values().toSeq())
    return found


def _walk(plan: Any, scope: frozenset[str], subquery: Any) -> Iterator[tuple[Any, frozenset[str]]]:
    """Every plan node with the relation names visible in it: ``events`` and the names of
    the CTEs around it; CTE bodies and subquery plans (inner children, and inside
    expressions: both, as a node may keep one apart from the other) included."""
    pending = [(plan, scope)]
    for _ in range(MAX_NODES):
        if not pending:
            return
        node, visible = pending.pop()
        yield node, visible
        if node.getClass().getSimpleName() == "UnresolvedWith":
            names: list[str] = []
            recursive = bool(node.allowRecursion())
            for pair in _seq(node.cteRelations()):
                name = str(pair._1()).lower()
                # a CTE sees the ones defined before it (and itself when RECURSIVE)
                own = [name] if recursive else []
                pending.append((pair._2(), visible | {*names, *own}))
                names.append(name)
            visible = visible | set(names)
        else:
            pending.extend((inner, visible) for inner in _seq(node.innerChildren()))
        pending.extend((child, visible) for child in _seq(node.children()))
        for expression in _expressions(node):
            pending.extend((sub, visible) for sub in _subquery_plans(expression, subquery))
    raise InvalidViewError(f"the SQL is too complex to check (over {MAX_NODES} plan nodes)")


def _subquery_plans(expression: Any, subquery: Any) -> Iterator[Any]:
    pending = [expression]
    while pending:
        e = pending.pop()
        if subquery.isInstance(e):
            yield e.plan()
        pending.extend(_seq(e.children()))


def _check_relation(parts: list[str], scope: frozenset[str]) -> None:
    if len(parts) == 1 and parts[0].lower() in scope:
        return
    shown = ".".join(f"`{p}`" if not p.isidentifier() else p for p in parts)
    if len(parts) == 2 and parts[0].lower() in FILE_FORMATS:
        raise InvalidViewError(f"{ONE_QUERY}: reading files ({shown}) is not allowed")
    raise InvalidViewError(f"{ONE_QUERY}: it reads {shown}, which is not allowed")


def _check_table_function(parts: list[str]) -> None:
    if len(parts) == 1 and parts[0].lower() in TABLE_FUNCTIONS:
        return
    allowed = ", ".join(sorted(TABLE_FUNCTIONS))
    raise InvalidViewError(
        f"{ONE_QUERY}: the table function {'.'.join(parts)}(...) is not allowed "
        f"(allowed: {allowed})"
    )


def _check_expressions(expression: Any) -> None:
    pending = [expression]
    while pending:
        e = pending.pop()
        name = e.getClass().getSimpleName()
        if name == "UnresolvedFunction":
            _check_function(_strings(e.nameParts()))
        elif name == "UnresolvedGenerator":
            _check_function([str(e.name().funcName())])
        pending.extend(_seq(e.children()))


def _check_function(parts: list[str]) -> None:
    prefix, name = tuple(p.lower() for p in parts[:-1]), parts[-1].lower()
    if prefix not in BUILTIN_PREFIXES:
        raise InvalidViewError(
            f"the function {'.'.join(parts)} is not allowed in a view: only Spark's built-in "
            "functions are"
        )
    if name in DENIED_FUNCTIONS:
        raise InvalidViewError(
            f"the function {name} is not allowed in a view: it reaches the JVM or the "
            "server's files"
        )


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _strings(scala_seq: Any) -> list[str]:
    return [str(x) for x in _seq(scala_seq)]


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:2000]
