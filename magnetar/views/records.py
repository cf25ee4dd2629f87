"""What the metadata store keeps of each view (``/views/{name}``), as typed records with
the only changes a view's life allows.

A view (:class:`ViewRecord`) has the version it serves and, while a new definition is being
built, a pending version (:class:`VersionRecord` each). Its life:

- :meth:`ViewRecord.build` starts a pending version (replacing a pending one not finished);
- :meth:`ViewRecord.promote` serves the pending version once it caught up (the only way the
  served version is replaced);
- :meth:`ViewRecord.fail` marks the served or the pending version FAILED (its error and
  where it stopped), :meth:`ViewRecord.retry` clears the served version's failure.

An as-of view (:class:`AsOfRecord`) is written once and never changes. ``resume_error``
(why a view could not resume after a restart) lives only in memory: the next start tries
again. The JSON layout is the one earlier releases wrote, so data directories carry over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.views.errors import ViewConflictError
from magnetar.views.model import Offsets


@dataclass(frozen=True)
class Failure:
    error: str
    at: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "at": self.at}


@dataclass(frozen=True)
class VersionRecord:
    """One version of a view: its definition and the offsets its backfill runs between."""

    definition: dict[str, Any]
    version: int
    bootstrap: dict[str, Offsets]  # {"start": offsets, "target": offsets}
    created_ms: int
    failed: Failure | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "definition": self.definition,
            "version": self.version,
            "bootstrap": self.bootstrap,
            "createdMs": self.created_ms,
        }
        if self.failed is not None:
            out["failed"] = self.failed.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VersionRecord:
        failed = d.get("failed")
        return cls(
            d["definition"],
            int(d["version"]),
            d["bootstrap"],
            int(d.get("createdMs", 0)),
            Failure(failed["error"], failed.get("at")) if failed else None,
        )


@dataclass
class ViewRecord:
    """A view: the version it serves and the one being built (see the module docstring)."""

    name: str
    current: VersionRecord
    pending: VersionRecord | None = None
    resume_error: str | None = field(default=None, compare=False)  # memory only

    virtual = False

    @property
    def definition(self) -> dict[str, Any]:
        return self.current.definition

    @property
    def version(self) -> int:
        return self.current.version

    def next_version(self) -> int:
        return max(self.current.version, self.pending.version if self.pending else 0) + 1

    def build(self, pending: VersionRecord) -> None:
        if pending.version <= self.current.version:
            raise ViewConflictError(
                f"{self.name}: a new version must be above v{self.current.version}"
            )
        self.pending = pending

    def promote(self) -> VersionRecord:
        """Serve the pending version (it caught up: a failure it had before a restart is
        over); returns the version it replaces."""
        if self.pending is None:
            raise ViewConflictError(f"{self.name} has no pending version to serve")
        old = self.current
        self.current, self.pending = replace(self.pending, failed=None), None
        self.resume_error = None
        return old

    def fail(self, failure: Failure, *, pending: bool) -> None:
        if pending:
            if self.pending is None:
                raise ViewConflictError(f"{self.name} has no pending version")
            self.pending = replace(self.pending, failed=failure)
        else:
            self.current = replace(self.current, failed=failure)

    def retry(self) -> None:
        self.current = replace(self.current, failed=None)

    def to_json(self) -> dict[str, Any]:
        out = self.current.to_json()
        if self.pending is not None:
            out["pending"] = self.pending.to_json()
        return out


@dataclass(frozen=True)
class AsOfRecord:
    """A read-only view of ``of`` materialized at a past point."""

    name: str
    of: str
    definition: dict[str, Any]
    dataset: str
    at: dict[str, Any]
    rows: int
    created_ms: int

    virtual = True

    def to_json(self) -> dict[str, Any]:
        return {
            "virtual": True,
            "of": self.of,
            "definition": self.definition,
            "dataset": self.dataset,
            "at": self.at,
            "rows": self.rows,
            "createdMs": self.created_ms,
        }


Record = ViewRecord | AsOfRecord


def record_from_json(name: str, d: dict[str, Any]) -> Record:
    if d.get("virtual"):
        return AsOfRecord(
            name,
            d["of"],
            d["definition"],
            d["dataset"],
            d["at"],
            int(d.get("rows", 0)),
            int(d.get("createdMs", 0)),
        )
    pending = d.get("pending")
    return ViewRecord(
        name,
        VersionRecord.from_json(d),
        VersionRecord.from_json(pending) if pending else None,
    )
