"""What a view is: its definition, its lifecycle, and how keys and rows are encoded.

A view maps the events of one or more topics to keyed state with a transformation: a Spark
SQL query over the table ``events`` or a Python fold ``apply(state, event) -> state``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from magnetar.core.errors import InvalidNameError
from magnetar.core.names import TopicName
from magnetar.views.errors import InvalidViewError

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")
LABEL = re.compile(r"[A-Za-z0-9_]{1,32}")
Offsets = dict[str, dict[str, int]]


class ViewState(enum.Enum):
    """Lifecycle of a view (one streaming query does both phases)."""

    CREATED = "CREATED"  # defined and persisted; its query has not started yet (Spark starting)
    BOOTSTRAPPING = "BOOTSTRAPPING"  # folding history: below the high-water mark of creation
    # restarted (after a stop or a crash): applying what was published meanwhile, up to the
    # sources' end offsets at the restart
    CATCHING_UP = "CATCHING_UP"
    # has applied everything published before it became LIVE (the creation high-water mark
    # and the end offsets when its query last started); applying new events as they come
    LIVE = "LIVE"
    STOPPED = "STOPPED"  # stopped on purpose (deleted, or the node shuts down); resumes on start
    FAILED = "FAILED"  # the transformation or the store failed; error and offset are kept
    VIRTUAL = "VIRTUAL"  # a read-only as-of view, materialized once at a past point


@dataclass(frozen=True)
class ViewDefinition:
    """What the user asked for; ``PUT /views/{name}`` with a different one builds a new
    version."""

    name: str
    source: tuple[str, ...]
    key: tuple[str, ...]
    store: str = "sqlite"
    sql: str | None = None
    python: str | None = None
    # what a message whose value does not parse as the topic's JSON schema does: "count"
    # (None, the default: applied with data = null and counted in the status) or "fail"
    on_unparsed: str | None = None

    @property
    def kind(self) -> str:
        return "sql" if self.sql is not None else "python"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["source"], out["key"] = list(self.source), list(self.key)
        out["onUnparsed"] = out.pop("on_unparsed")
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def parse(cls, name: str, body: Any) -> ViewDefinition:
        """Validate a request body; InvalidViewError says what is wrong."""
        check_name(name)
        if not isinstance(body, Mapping):
            raise InvalidViewError("a view definition is a JSON object")
        unknown = set(body) - {"name", "source", "key", "store", "sql", "python", "onUnparsed"}
        if unknown:
            raise InvalidViewError(f"unknown field(s) {sorted(unknown)} in the view definition")
        if (body.get("sql") is None) == (body.get("python") is None):
            raise InvalidViewError('give exactly one transformation: "sql" or "python"')
        for field_name in ("sql", "python", "store"):
            value = body.get(field_name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidViewError(f'"{field_name}" must be a non-empty string')
        python = body.get("python")
        if python is not None and not re.fullmatch(r"[\w.]+:[\w.]+", python):
            raise InvalidViewError(f'"python" must be "module:function", got {python!r}')
        return cls(
            name=name,
            source=_topics(body.get("source")),
            key=_strings(body.get("key"), "key"),
            store=body.get("store") or "sqlite",
            sql=body.get("sql"),
            python=python,
            on_unparsed=_on_unparsed(body.get("onUnparsed")),
        )


def _on_unparsed(value: Any) -> str | None:
    """None for the default ("count"), so definitions made before the setting existed
    compare equal to the same definition given again."""
    if value is None or value == "count":
        return None
    if value != "fail":
        raise InvalidViewError(f'"onUnparsed" must be "count" or "fail", got {value!r}')
    return "fail"


def check_name(name: str) -> None:
    if not NAME.fullmatch(name) or "__" in name:
        raise InvalidViewError(
            f"bad view name {name!r}: use a letter then letters, digits or single _ (at most 48)"
        )


def _strings(value: Any, what: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
        raise InvalidViewError(f'"{what}" must be a column name or a non-empty list of them')
    if len(set(items)) != len(items):
        raise InvalidViewError(f'"{what}" lists a name twice')
    return tuple(x.strip() for x in items)


def _topics(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [t for t in value.split(",") if t.strip()]
    names = _strings(value, "source")
    try:
        return tuple(sorted(str(TopicName.parse(t)) for t in names))
    except InvalidNameError as e:  # say which field was wrong, and what the rule is
        raise InvalidViewError(f'bad topic in "source": {e}') from None


@dataclass
class Position:
    """Where a dataset's state stands: the last batch committed and the source offsets its
    state reflects (exclusive end per topic and partition)."""

    batch_id: int = -1
    offsets: Offsets = field(default_factory=dict)
    committed_ms: int = 0
    epoch: int = 0  # the leader epoch that wrote it (several brokers: see views/leader.py)

    def processed(self) -> int:
        return sum(o for parts in self.offsets.values() for o in parts.values())


def key_text(values: Sequence[Any]) -> str:
    """The stored key of a row: the value itself for one key column, a JSON array for more."""
    if len(values) == 1:
        v = values[0]
        return v if isinstance(v, str) else json.dumps(plain(v))
    return json.dumps([plain(v) for v in values], separators=(",", ":"))


def plain(value: Any) -> Any:
    """A JSON-able form of a Spark/Arrow value (timestamps as ISO text, decimals as float)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def encode_row(row: Mapping[str, Any]) -> str:
    return json.dumps(plain(dict(row)), separators=(",", ":"), sort_keys=True)


def sum_offsets(offsets: Offsets) -> int:
    return sum(o for parts in offsets.values() for o in parts.values())
