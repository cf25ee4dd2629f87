"""The journal checkpoint is node-local: a file beside the journal, never shared metadata
(issue 13). A data directory written before kept it in the metadata store: the first start
reads it from there (its fsynced sizes still guard acknowledged data), writes the file and
removes the old node. Crashed directories come from tests/storage/test_corruption.py."""

from __future__ import annotations

from pathlib import Path

from magnetar.core.config import Settings
from magnetar.meta import open_metadata_store
from magnetar.storage import catalog
from tests.storage.test_corruption import (
    ENTRY,
    SYNCED,
    assert_names,
    crashed_after_checkpoint,
    expected,
    open_fails,
    opened,
    read_all,
    shape,
    truncate,
)


async def _as_written_before(settings: Settings) -> None:
    """Move the checkpoint where data directories before the file kept it."""
    path = settings.journal_path / catalog.CHECKPOINT_FILE
    meta = open_metadata_store(settings.metadata)
    try:
        await meta.put(catalog.LEGACY_CHECKPOINT, path.read_bytes())
    finally:
        await meta.aclose()
    path.unlink()


async def _legacy_node(settings: Settings) -> bytes | None:
    meta = open_metadata_store(settings.metadata)
    try:
        node = await meta.get(catalog.LEGACY_CHECKPOINT)
        return None if node is None else node.value
    finally:
        await meta.aclose()


async def test_the_checkpoint_is_a_file_in_the_journal_directory(tmp_path: Path) -> None:
    crashed, _ = await crashed_after_checkpoint(tmp_path)
    assert (crashed.journal_path / catalog.CHECKPOINT_FILE).exists()
    assert await _legacy_node(crashed) is None


async def test_a_checkpoint_kept_in_metadata_is_read_once_then_moved_to_the_file(
    tmp_path: Path,
) -> None:
    crashed, segment = await crashed_after_checkpoint(tmp_path)
    await _as_written_before(crashed)
    truncate(segment, SYNCED * ENTRY)  # the unsynced tail lost: the journal refills it
    async with opened(crashed) as engine:
        assert shape(await read_all(engine, "p1")) == expected(range(10))
    assert (crashed.journal_path / catalog.CHECKPOINT_FILE).exists()
    assert await _legacy_node(crashed) is None
    async with opened(crashed) as engine:
        assert shape(await read_all(engine, "p1")) == expected(range(10))


async def test_a_checkpoint_kept_in_metadata_still_guards_acknowledged_data(
    tmp_path: Path,
) -> None:
    crashed, segment = await crashed_after_checkpoint(tmp_path)
    await _as_written_before(crashed)
    truncate(segment, 3 * ENTRY)  # below what that checkpoint says was fsynced
    assert_names(await open_fails(crashed), segment, 3 * ENTRY)
