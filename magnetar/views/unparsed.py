"""Messages whose value does not parse as the topic's JSON schema, per view.

Such a message reaches a view with ``data`` null (the source cannot build the record), and a
SQL view would fold it into a ``null``-key row without a word. A view therefore counts them
(``"onUnparsed": "count"``, the default: status ``unparsed`` and ``firstUnparsed``) or
stops at the first one (``"onUnparsed": "fail"``: FAILED at that offset, nothing of the
batch committed).

Exactly once without touching the state store: a micro-batch's count is a function of its
offset range alone (Spark writes the range to its offset log before the batch runs, and a
replay reads the same messages), so :class:`UnparsedLog` keeps one small file per batch id
beside Spark's checkpoint, written *before* the store commits the batch. The total is the
sum over the batch ids the store has committed: a batch that fails after its file was
written is not counted, and its replay rewrites the same file with the same count.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.views.model import Offsets

COUNT, FAIL = "count", "fail"
MODES = (COUNT, FAIL)


@dataclass(frozen=True)
class Unparsed:
    """How many messages did not parse, and where the first one is
    (``{"topic", "partition", "offset"}``)."""

    count: int = 0
    first: dict[str, Any] | None = None

    def __add__(self, later: Unparsed) -> Unparsed:
        return Unparsed(self.count + later.count, self.first or later.first)

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "first": self.first}

    @classmethod
    def from_json(cls, raw: Any) -> Unparsed:
        return cls(int(raw.get("count", 0)), raw.get("first"))


def in_rows(table: pa.Table) -> Unparsed:
    """The rows of a source table (columns ``value``, ``data``, ``topic``, ``partition``,
    ``offset``) whose value is there but whose ``data`` is null: it did not parse."""
    if "data" not in table.column_names or not table.num_rows:
        return Unparsed()
    bad = pc.and_(pc.is_valid(table.column("value")), pc.is_null(table.column("data")))
    rows = table.filter(bad)
    if not rows.num_rows:
        return Unparsed()
    rows = rows.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    first = {k: rows.column(k)[0].as_py() for k in ("topic", "partition", "offset")}
    return Unparsed(rows.num_rows, first)


def in_range(
    url: str, topics: Iterable[str], begin: Offsets, end: Offsets, token: str | None = None
) -> Unparsed:
    """The unparsed messages in ``[begin, end)`` of ``topics``, read straight from the
    segments as the ``magnetar`` source reads them (same decoding, so the same verdict).
    Used for SQL views, whose batch callback sees only the query's result rows."""
    from magnetar.spark import planning
    from magnetar.spark.options import parse
    from magnetar.spark.reading import read_slice
    from magnetar.spark.source import data_definition
    from magnetar.tier.rows import record_type

    options = {"url": url, "topics": ",".join(topics), **({"token": token} if token else {})}
    plans = planning.fetch_plans(parse(options, streaming=False))
    mapped = record_type(data_definition(plans))
    if mapped is None:
        return Unparsed()
    start = {
        t: {**{str(p["index"]): p["start"] for p in plans[t]["partitions"]}, **begin.get(t, {})}
        for t in plans
    }
    found = Unparsed()
    columns = ["value", "topic", "partition", "offset", "data"]
    for piece in planning.slices(plans, start, {t: end.get(t, start[t]) for t in plans}):
        for batch in read_slice(piece, mapped[0], columns):
            found = found + in_rows(pa.Table.from_batches([batch]))
    return found


def failure_message(found: Unparsed) -> str:
    at = found.first or {}
    return (
        f"the message at {at.get('topic')} partition {at.get('partition')} offset "
        f"{at.get('offset')} does not parse as the topic's JSON schema ({found.count} such "
        'message(s) in this batch) and the view has "onUnparsed": "fail". Fix the '
        'producer, or PUT the view again with "onUnparsed": "count" (the default) to apply '
        "such messages with data = null and count them in the view's status"
    )


class UnparsedLog:
    """Per-batch counts under a view version's checkpoint; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: tuple[int, Unparsed] | None = None

    def record(self, batch_id: int, found: Unparsed, committed: int) -> None:
        """Keep ``found`` for ``batch_id`` (durable on return), before the store commits
        the batch; ``committed`` is the last batch id the store holds."""
        if found.count == 0:
            return
        self._compact(committed)
        _write(self.directory / f"{batch_id}.json", found.to_json())

    def total(self, committed: int) -> Unparsed:
        """The unparsed messages of every batch up to ``committed`` (the store's batch id)."""
        cached = self._cache
        if cached is not None and cached[0] == committed:
            return cached[1]
        base_upto, total = self._base()
        for batch_id, path in self._batches():
            if base_upto < batch_id <= committed:
                total = total + Unparsed.from_json(json.loads(path.read_text()))
        self._cache = (committed, total)
        return total

    def _compact(self, committed: int) -> None:
        """Fold the files of committed batches into ``base.json`` (a crash between the two
        steps leaves files the base already covers; they are skipped, then removed)."""
        base_upto, total = self._base()
        merged = [(b, p) for b, p in self._batches() if b <= committed]
        if not merged:
            return
        for batch_id, path in merged:
            if batch_id > base_upto:
                total = total + Unparsed.from_json(json.loads(path.read_text()))
        upto = max(base_upto, max(b for b, _ in merged))
        _write(self.directory / "base.json", {"upTo": upto, **total.to_json()})
        for _, path in merged:
            path.unlink(missing_ok=True)

    def _base(self) -> tuple[int, Unparsed]:
        path = self.directory / "base.json"
        if not path.exists():
            return -1, Unparsed()
        raw = json.loads(path.read_text())
        return int(raw["upTo"]), Unparsed.from_json(raw)

    def _batches(self) -> list[tuple[int, Path]]:
        if not self.directory.exists():
            return []
        found = [(int(p.stem), p) for p in self.directory.glob("*.json") if p.stem.isdigit()]
        return sorted(found)


def _write(path: Path, content: dict[str, Any]) -> None:
    """Write ``content`` atomically and durably (temp file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(content, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
