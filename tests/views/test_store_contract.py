"""The state store contract (magnetar/views/stores/base.py), run against every backend:
SQLite, and real PostgreSQL and Redis servers."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from magnetar.views.errors import InvalidViewError, StateStoreError, ViewFencedError
from magnetar.views.stores import StateStore, open_state_store
from tests.views.conftest import STORES

OFFS = {"persistent://public/default/t": {"0": 10}}


@pytest.fixture
def store(store_url: str) -> Iterator[StateStore]:
    s = open_state_store(store_url)
    for ds in ("ds", "other", "big"):
        s.drop(ds)
    s.drop_alias("view")
    try:
        yield s
    finally:
        s.close()


pytestmark = pytest.mark.parametrize("store_url", STORES, indirect=True)


def test_a_new_dataset_has_no_position_and_no_rows(store: StateStore) -> None:
    assert store.position("ds") is None
    assert store.scan("ds", 10) == []
    assert store.count("ds") == 0
    assert store.get("ds", "alice") is None


def test_commit_applies_rows_and_position_together(store: StateStore) -> None:
    assert store.commit("ds", 0, OFFS, {"alice": {"user": "alice", "n": 1}, "bob": {"n": 2}})
    assert store.get("ds", "alice") == {"user": "alice", "n": 1}
    position = store.position("ds")
    assert position is not None
    assert (position.batch_id, position.offsets) == (0, OFFS)
    assert position.committed_ms > 0
    assert store.scan("ds", 10) == [{"user": "alice", "n": 1}, {"n": 2}]
    assert store.scan("ds", 1) == [{"user": "alice", "n": 1}]
    assert store.count("ds") == 2


def test_a_replayed_batch_changes_nothing(store: StateStore) -> None:
    assert store.commit("ds", 3, OFFS, {"alice": {"n": 1}})
    later = {"persistent://public/default/t": {"0": 99}}
    assert not store.commit("ds", 3, later, {"alice": {"n": 100}}, ["alice"])
    assert not store.commit("ds", 2, later, {"carol": {"n": 5}})
    assert store.get("ds", "alice") == {"n": 1}
    assert store.get("ds", "carol") is None
    position = store.position("ds")
    assert position is not None and (position.batch_id, position.offsets) == (3, OFFS)


def test_upsert_replaces_and_delete_removes(store: StateStore) -> None:
    store.commit("ds", 0, OFFS, {"a": {"n": 1}, "b": {"n": 1}})
    store.commit("ds", 1, OFFS, {"a": {"n": 2}}, ["b", "never-there"])
    assert store.get_many("ds", ["a", "b"]) == {"a": {"n": 2}}
    assert store.count("ds") == 1


def test_datasets_are_independent_and_drop_removes_one(store: StateStore) -> None:
    store.commit("ds", 5, OFFS, {"a": {"n": 1}})
    store.commit("other", 0, {}, {"a": {"n": 9}})
    store.drop("ds")
    assert store.position("ds") is None and store.get("ds", "a") is None
    assert store.get("other", "a") == {"n": 9}
    assert store.commit("ds", 0, OFFS, {"a": {"n": 3}}), "a dropped dataset starts over"
    store.drop("missing")  # ignored


def test_values_keep_their_json_types(store: StateStore) -> None:
    row = {"s": "x", "i": 7, "f": 1.5, "b": True, "none": None, "list": [1, "a"], "d": {"k": 1}}
    store.commit("ds", 0, OFFS, {"k": row})
    assert store.get("ds", "k") == row


def test_a_failed_commit_leaves_nothing(store: StateStore) -> None:
    store.commit("ds", 0, OFFS, {"a": {"n": 1}})

    class Unencodable:
        pass

    with pytest.raises(TypeError):
        store.commit("ds", 1, {}, {"b": {"n": 2}, "c": {"bad": Unencodable()}})
    assert store.get_many("ds", ["b", "c"]) == {}
    position = store.position("ds")
    assert position is not None and position.batch_id == 0


def test_large_batches_commit_whole(store: StateStore) -> None:
    rows = {f"user{i:05d}": {"n": i} for i in range(20_000)}
    assert store.commit("big", 0, OFFS, rows)
    assert store.count("big") == 20_000
    assert store.get("big", "user19999") == {"n": 19999}


def test_concurrent_commits_of_one_batch_apply_once(store: StateStore) -> None:
    results: list[bool] = []

    def commit(i: int) -> None:
        results.append(store.commit("ds", 1, OFFS, {f"k{i}": {"n": i}}))

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert store.count("ds") == 1


def test_alias_points_the_view_at_a_dataset(store: StateStore) -> None:
    store.commit("ds", 0, OFFS, {"a": {"n": 1}})
    store.commit("other", 0, OFFS, {"a": {"n": 2}})
    store.alias("view", "ds")
    store.alias("view", "other")
    store.drop_alias("view")
    store.drop_alias("view")  # missing: ignored


def test_unknown_scheme_and_unreachable_server_are_clear(store_url: str) -> None:
    with pytest.raises(InvalidViewError, match="unknown state store"):
        open_state_store("mongodb://x")
    if store_url.startswith("postgresql"):
        with pytest.raises(StateStoreError, match="cannot open"):
            open_state_store("postgresql://postgres@127.0.0.1:1/postgres")
    if store_url.startswith("redis"):
        with pytest.raises(StateStoreError, match="cannot reach"):
            open_state_store("redis://127.0.0.1:1/0")


def test_a_fence_refuses_every_later_commit_of_an_older_epoch(store: StateStore) -> None:
    assert store.fence("ds", 1) is None  # nothing committed yet: no position
    assert store.position("ds") is None
    assert store.commit("ds", 0, OFFS, {"alice": {"n": 1}}, epoch=1)
    later = {"persistent://public/default/t": {"0": 20}}
    found = store.fence("ds", 2)
    assert found is not None and (found.batch_id, found.offsets, found.epoch) == (0, OFFS, 1)
    with pytest.raises(ViewFencedError):
        store.commit("ds", 1, later, {"alice": {"n": 2}}, epoch=1)  # the old leader, too late
    with pytest.raises(ViewFencedError):
        store.fence("ds", 1)
    assert store.get("ds", "alice") == {"n": 1}
    assert store.commit("ds", 1, later, {"alice": {"n": 3}}, epoch=2)
    position = store.position("ds")
    assert position is not None and (position.batch_id, position.epoch) == (1, 2)
    assert not store.commit("ds", 1, later, {"alice": {"n": 4}}, epoch=2)  # still a replay
    assert store.get("ds", "alice") == {"n": 3}


def test_a_dataset_written_without_epochs_is_at_epoch_zero(store: StateStore) -> None:
    assert store.commit("ds", 0, OFFS, {"alice": {"n": 1}})
    position = store.position("ds")
    assert position is not None and position.epoch == 0
    assert store.fence("ds", 0) == position
