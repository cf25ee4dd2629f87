"""Damaged replicas: found by reads and checks, repaired from a good copy.

A storage node verifies each entry's checksum and length when it reads it; a copy that fails
is answered ``DAMAGED`` (with the intact records before it) and the broker reads the entry
from the next replica of its write set, so a reader never notices. The broker records the
damaged copy (ledger, node, entry, problem), counts it, and repairs it the way BookKeeper's
replication worker re-replicates a fragment: the node's copy of the closed ledger is
dropped and every entry the node should hold is written back to it from the other replicas.

Repairs run on their own after a read meets damage, at the next audit round for anything
left over (a ledger still open, a replica unreachable), and at once on ``check`` with
``repair``. ``check`` without it only reads and reports.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from magnetar.cluster.errors import NodeUnavailableError
from magnetar.cluster.wire import INDEX_ROW, LEDGER, Op, Status
from magnetar.storage import SegmentState
from magnetar.storage.errors import StorageError

if TYPE_CHECKING:
    from magnetar.cluster.replicated import Ledger, ReplicatedStorage

log = logging.getLogger(__name__)


def _ids(eids: list[int]) -> str:
    shown = ", ".join(str(e) for e in eids[:10])
    return shown + (f", … ({len(eids)} in all)" if len(eids) > 10 else "")


class Repairs:
    """The damaged replicas a broker knows of, and their repair."""

    def __init__(self, store: ReplicatedStorage) -> None:
        self.store = store
        self.found: dict[int, dict[str, str]] = {}  # ledger id → node → what is wrong there
        self._ledgers: dict[int, Ledger] = {}
        self._running: dict[tuple[int, str], asyncio.Task[int]] = {}

    def met(self, ledger: Ledger, node: str, problem: str) -> None:
        """A read met a damaged copy on ``node`` (and was served by another replica)."""
        self.store.stats["damaged_replica_reads"] += 1
        known = self.found.setdefault(ledger.ledger_id, {})
        if node not in known:
            log.warning("%s; read from another replica, repair scheduled", problem)
        known[node] = problem
        self._ledgers[ledger.ledger_id] = ledger
        self.schedule(ledger, node)

    def schedule(self, ledger: Ledger, node: str) -> None:
        key = (ledger.ledger_id, node)
        if key in self._running or ledger.info.state is SegmentState.OPEN:
            return  # an open ledger is repaired once it is closed (by the audit round)
        task = asyncio.get_running_loop().create_task(self._repair_logged(ledger, node))
        self._running[key] = task
        task.add_done_callback(lambda _t: self._running.pop(key, None))

    async def _repair_logged(self, ledger: Ledger, node: str) -> int:
        try:
            return await self.repair(ledger, node)
        except StorageError as e:  # the next audit round tries again
            log.warning("ledger %d: repairing the copy on %s failed: %s", ledger.ledger_id, node, e)
            return 0

    async def retry(self) -> None:
        """Schedule the repairs still owed (called by each audit round); a ledger of a
        partition this broker no longer serves is left to its new owner."""
        for lid, nodes in list(self.found.items()):
            ledger = self._ledgers.get(lid)
            if ledger is None or not self.store.serves_ledger(lid):
                self.forget(lid)
                continue
            for node in list(nodes):
                self.schedule(ledger, node)

    def damaged(self, ledger_ids: set[int]) -> dict[int, str]:
        return {
            lid: "; ".join(nodes.values())
            for lid, nodes in self.found.items()
            if lid in ledger_ids and nodes
        }

    def forget(self, ledger_id: int) -> None:
        self.found.pop(ledger_id, None)
        self._ledgers.pop(ledger_id, None)

    # -- repair -------------------------------------------------------------------------

    async def repair(self, ledger: Ledger, node: str) -> int:
        """Replace ``node``'s copy of the closed ``ledger`` by the entries it should hold,
        read from the other replicas; returns how many were written. Until it is done,
        reads of that node's entries go to the other replicas. Not while the ledger is
        open or a replica it copies from is unregistered (returns 0; retried later)."""
        key = (ledger.ledger_id, node)
        running = self._running.get(key)
        if running is not None and running is not asyncio.current_task():
            return await asyncio.shield(running)
        if ledger.info.state is SegmentState.OPEN or not ledger.info.local:
            return 0
        spans = self._spans(ledger, node)
        sources = {n for _, nodes in ledger.ensembles for n in nodes if n != node}
        absent = sorted(n for n in [*sources, node] if n not in self.store.nodes.nodes)
        if absent:  # perhaps registered since the last watch event
            await self.store.nodes.refresh()
            absent = [n for n in absent if n not in self.store.nodes.nodes]
        if absent:
            log.warning(
                "ledger %d: the copy on %s waits for its repair: %s not registered",
                ledger.ledger_id,
                node,
                ", ".join(absent),
            )
            return 0
        lid = ledger.ledger_id
        lost = await self._without_good_copy(ledger, node)
        if lost:  # dropping this copy could lose them: leave it, say so
            log.warning(
                "ledger %d: the copy on %s is not repaired: entries %s have no intact copy on "
                "another storage node",
                lid,
                node,
                _ids(lost),
            )
            return 0
        await self._call(node, Op.DELETE, lid)
        copied = 0
        for first, end in spans:
            copied += await self.store.copy_fragment(ledger, first, end, node, node)
        await self._call(node, Op.FENCE, lid)  # closed: no writer may add to it again
        self.found.get(lid, {}).pop(node, None)
        if not self.found.get(lid):
            self.forget(lid)
        self.store.stats["repaired_replicas"] += 1
        self.store.stats["repaired_entries"] += copied
        log.warning(
            "ledger %d: the damaged copy on storage node %s was replaced from the other "
            "replicas (%d entries written)",
            lid,
            node,
            copied,
        )
        return copied

    async def _without_good_copy(self, ledger: Ledger, node: str) -> list[int]:
        """The entries ``node`` should hold that no other node holds intact (each other
        replica reads and verifies its copy first)."""
        good: set[int] = set()
        for other in sorted({n for _, nodes in ledger.ensembles for n in nodes} - {node}):
            report = await self._check_replica(ledger, other, record=False)
            if "could not be checked" in report["error"]:  # unreachable: vouches for nothing
                continue
            bad = set(report["damaged"]) | set(report["missing"])
            good |= {e for e in report["expected"] if e not in bad}
        wanted = [e for e in range(ledger.last_entry + 1) if node in ledger.write_set(e)]
        return [e for e in wanted if e not in good]

    @staticmethod
    def _spans(ledger: Ledger, node: str) -> list[tuple[int, int]]:
        out = []
        for i, (first, nodes) in enumerate(ledger.ensembles):
            last = ledger.ensembles[i + 1][0] - 1 if i + 1 < len(ledger.ensembles) else None
            last = ledger.last_entry if last is None else min(last, ledger.last_entry)
            if node in nodes and first <= last:
                out.append((first, last))
        return out

    async def _call(self, node: str, op: Op, lid: int) -> bytes:
        status, answer = await self.store.nodes.call(node, op, LEDGER.pack(lid))
        if status is not Status.OK and not (op is Op.DELETE and status is Status.NO_LEDGER):
            raise StorageError(
                f"ledger {lid} on {node}: {op.name} answered {status.name} "
                f"{answer.decode(errors='replace')}"
            )
        return answer

    # -- check --------------------------------------------------------------------------

    async def check(self, ledgers: list[Ledger], *, repair: bool) -> list[dict[str, Any]]:
        """One row per ledger (the local engine's check rows, plus ``replicas``: what each
        storage node holds of it). ``error`` names each node with damaged or missing
        entries and the entry ids; with ``repair``, those copies are repaired first and the
        row tells what is left afterwards."""
        rows = []
        for ledger in ledgers:
            info = ledger.info
            row: dict[str, Any] = {
                "segmentId": ledger.ledger_id,
                "state": info.state.value,
                "entries": ledger.last_entry + 1,
                "local": info.local,
                "error": "",
                "replicas": [],
            }
            if info.state is SegmentState.DELETED or not info.local or ledger.last_entry < 0:
                rows.append(row)
                continue
            for node in sorted({n for _, nodes in ledger.ensembles for n in nodes}):
                replica = await self._check_replica(ledger, node)
                if replica["error"] and repair and info.state is not SegmentState.OPEN:
                    copied = await self.repair(ledger, node)
                    replica = {**await self._check_replica(ledger, node), "repaired": copied}
                replica.pop("expected", None)
                row["replicas"].append(replica)
            row["error"] = "; ".join(r["error"] for r in row["replicas"] if r["error"])
            rows.append(row)
        return rows

    async def _check_replica(
        self, ledger: Ledger, node: str, *, record: bool = True
    ) -> dict[str, Any]:
        """What ``node`` holds of ``ledger``: entries, damaged and missing ids, ``error``.
        With ``record``, a problem found is remembered for repair (a clean copy forgets)."""
        lid = ledger.ledger_id
        out: dict[str, Any] = {"node": node, "entries": 0, "damaged": [], "missing": []}
        expected = [e for e in range(ledger.last_entry + 1) if node in ledger.write_set(e)]
        if not expected:
            return {**out, "error": ""}
        out["expected"] = expected
        try:
            status, body = await self.store.nodes.call(node, Op.CHECK, LEDGER.pack(lid))
            held: set[int] = set()
            if status is Status.OK:
                report = json.loads(body)
                _, index = await self.store.nodes.call(node, Op.INDEX, LEDGER.pack(lid))
                held = {
                    INDEX_ROW.unpack_from(index, at)[0]
                    for at in range(0, len(index), INDEX_ROW.size)
                }
            elif status is Status.NO_LEDGER:
                report = {"entries": 0, "damaged": [], "problem": ""}
            else:
                raise StorageError(f"{status.name} {body.decode(errors='replace')}")
        except (NodeUnavailableError, StorageError) as e:
            return {**out, "error": f"storage node {node}: could not be checked: {e}"}
        damaged = [e for e in report["damaged"] if e <= ledger.last_entry]
        missing = [e for e in expected if e not in held]
        out.update(entries=report["entries"], damaged=damaged, missing=missing)
        problems = []
        if damaged:
            problems.append(f"entries {_ids(damaged)} damaged ({report['problem']})")
        if missing:
            if report["problem"] and not damaged:  # lost to damage met at the node's start
                problems.append(f"entries {_ids(missing)} not readable ({report['problem']})")
            else:
                problems.append(f"entries {_ids(missing)} missing")
        error = f"storage node {node}: ledger {lid}: " + "; ".join(problems) if problems else ""
        if not record:
            return {**out, "error": error}
        if error:
            self.found.setdefault(lid, {})[node] = error
            self._ledgers[lid] = ledger
        elif lid in self.found:
            self.found[lid].pop(node, None)
        return {**out, "error": error}
