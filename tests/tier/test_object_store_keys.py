"""The object store's own wall: a key that would resolve outside the store's root is refused
before anything is read or written, on every backend (a local directory and S3), whatever
the names above it let through. On a local disk the test also looks at the file system:
nothing appears outside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.tier import LocalObjectStore, ObjectStore, UnsafeKeyError

UNSAFE_KEYS = [
    "..",
    "../escaped",
    "../../ESCAPED/00000000000000000000.parquet",
    "public/default/../../../escaped",
    "a/./b",
    ".",
    "",
    "/etc/escaped",
    "a//b",
    "a/",
    "a\\..\\..\\b",
    "a\x00b",
    "a/\nb",
]


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("key", UNSAFE_KEYS, ids=repr)
def test_every_call_refuses_a_key_that_leaves_the_root(store: ObjectStore, key: str) -> None:
    store.put("kept/object", b"kept")
    calls = {
        "put": lambda: store.put(key, b"escaped"),
        "get": lambda: store.get(key),
        "open": lambda: store.open(key),
        "size": lambda: store.size(key),
        "exists": lambda: store.exists(key),
        "delete": lambda: store.delete(key),
    }
    for call, run in calls.items():
        with pytest.raises(UnsafeKeyError, match="a key must stay inside") as info:
            run()
        assert store.url in str(info.value), call
    assert store.list() == ["kept/object"]
    assert store.get("kept/object") == b"kept"


@pytest.mark.parametrize("prefix", ["..", "../", "a/../..", "/etc"])
def test_list_refuses_a_prefix_that_leaves_the_root(store: ObjectStore, prefix: str) -> None:
    with pytest.raises(UnsafeKeyError):
        store.list(prefix)


def test_keys_the_offloader_builds_are_accepted(store: ObjectStore) -> None:
    key = "my-tenant/ns.v1/orders=eu:2-partition-3/00000000000000000007/a1b2/data.parquet"
    store.put(key, b"rows")
    assert store.get(key) == b"rows"
    assert store.list("my-tenant/ns.v1/") == [key]


@pytest.mark.parametrize("key", UNSAFE_KEYS, ids=repr)
def test_nothing_is_written_outside_a_local_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "data" / "tier"
    store = LocalObjectStore(root)
    before = files_under(tmp_path)
    with pytest.raises(UnsafeKeyError):
        store.put(key, b"escaped")
    assert files_under(tmp_path) == before
    assert not list(Path("/").glob("escaped*"))


def test_a_symbolic_link_inside_the_root_does_not_lead_a_write_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = LocalObjectStore(tmp_path / "tier")
    os.symlink(outside, tmp_path / "tier" / "link")
    with pytest.raises(UnsafeKeyError):
        store.put("link/escaped", b"escaped")
    with pytest.raises(UnsafeKeyError):
        store.get("link/escaped")
    assert list(outside.iterdir()) == []


def test_a_root_reached_through_a_symbolic_link_still_works(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "alias")
    store = LocalObjectStore(tmp_path / "alias" / "tier")
    store.put("t/ns/topic/1.parquet", b"x")
    assert store.get("t/ns/topic/1.parquet") == b"x"
    assert (tmp_path / "real" / "tier" / "t" / "ns" / "topic" / "1.parquet").exists()
