"""A storage node whose copy of one ledger is damaged where its engine's recovery checks it
(an open entry file, below the last checkpoint) still starts.

A standalone refuses to start then (the data has no other copy); a storage node's ledgers
have replicas. So the node sets that ledger aside: its directory is renamed
``<dir>.damaged-<time>`` (kept for inspection), its records are removed from the node's catalog, and
the ledger is listed in ``damaged.json`` with the problem. The node then answers reads of it
DAMAGED, the broker reads the entries from the other replicas and repairs this copy (see
:mod:`magnetar.cluster.repair`), which clears the entry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path

from magnetar.core.config import Settings
from magnetar.meta import MetadataStore
from magnetar.storage import StorageEngine, StorageSettings, catalog
from magnetar.storage.errors import CorruptionError

log = logging.getLogger(__name__)

MAX_SET_ASIDE = 100  # ledgers set aside in one start before giving up


class Quarantine:
    """The ledgers this node set aside: ledger id → what was wrong (``damaged.json``)."""

    def __init__(self, data_dir: Path) -> None:
        self.file = data_dir / "damaged.json"
        self.ledgers: dict[int, str] = {}
        with contextlib.suppress(FileNotFoundError):
            self.ledgers = {int(k): v for k, v in json.loads(self.file.read_text()).items()}

    def add(self, ledger_id: int, problem: str) -> None:
        self.ledgers[ledger_id] = problem
        self._save()

    def discard(self, ledger_id: int) -> None:
        if self.ledgers.pop(ledger_id, None) is not None:
            self._save()

    def _save(self) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in self.ledgers.items()}))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.file)


async def open_engine(
    settings: Settings, meta: MetadataStore, quarantine: Quarantine
) -> StorageEngine:
    """Open the node's engine, setting aside each ledger whose damage stops its recovery."""
    for _ in range(MAX_SET_ASIDE):
        try:
            return await StorageEngine.open(StorageSettings.of(settings), meta)
        except CorruptionError as e:
            ledger_id = await _set_aside(settings, meta, e)
            quarantine.add(ledger_id, str(e))
            log.warning(
                "storage node: ledger %d set aside, its copy here is damaged (%s); reads go "
                "to its other replicas and the broker repairs this copy",
                ledger_id,
                e,
            )
    raise CorruptionError(str(settings.ledger_path), 0, f"over {MAX_SET_ASIDE} damaged ledgers")


async def _set_aside(settings: Settings, meta: MetadataStore, error: CorruptionError) -> int:
    """Remove the ledger whose file ``error`` names from the catalog; its directory is kept
    as ``<dir>.damaged-<ns>``. Re-raises ``error`` when it names no ledger's file."""
    directory = Path(error.path).parent
    if directory.parent != settings.ledger_path or not directory.name.isdigit():
        raise error
    pid = int(directory.name)
    root = f"{catalog.ROOT}/partitions"
    for child in await meta.list_children(root):
        node = await meta.get(f"{root}/{child}")
        if node is None:
            continue
        record = json.loads(node.value)
        name = str(record["name"])
        if record["id"] != pid or not name.startswith("L"):
            continue
        await meta.delete_recursive(catalog.segments_path(pid))
        await meta.delete(f"{root}/{child}")
        directory.rename(directory.with_name(f"{directory.name}.damaged-{time.time_ns()}"))
        return int(name[1:])
    raise error
