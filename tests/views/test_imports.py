"""Python views import their module only from the ``views_python_path`` directories (issue
22): a module elsewhere — on ``sys.path``, in the standard library, or reached through a
symbolic link — is refused before any of its code runs; with no directory configured every
Python view is refused with a message saying how to enable them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.views.errors import InvalidViewError
from magnetar.views.transform import load_function

MODULE = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def apply(state, event):
    return {{"n": (state or {{"n": 0}})["n"] + 1}}
"""


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(trusted, outside): two directories; modules written there are forgotten after."""
    trusted, outside = tmp_path / "trusted", tmp_path / "outside"
    trusted.mkdir()
    outside.mkdir()
    before = set(sys.modules)
    yield trusted.resolve(), outside.resolve()
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _module(where: Path, name: str, marker: Path) -> Path:
    path = where / f"{name}.py"
    path.write_text(MODULE.format(marker=str(marker)))
    return path


def test_a_module_under_the_path_loads(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    trusted, _ = dirs
    _module(trusted, "v22_counts", tmp_path / "ran")
    apply = load_function("v22_counts:apply", roots=[trusted])
    assert apply(None, {}) == {"n": 1}
    package = trusted / "v22_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _module(package, "fold", tmp_path / "ran2")
    assert load_function("v22_pkg.fold:apply", roots=[trusted])({"n": 4}, {}) == {"n": 5}


def test_a_module_outside_the_path_is_refused_unrun(
    dirs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trusted, outside = dirs
    marker = tmp_path / "ran"
    _module(outside, "v22_evil", marker)
    monkeypatch.syspath_prepend(str(outside))  # importable the ordinary way
    with pytest.raises(InvalidViewError, match="views_python_path") as refused:
        load_function("v22_evil:apply", roots=[trusted])
    assert "not found" in str(refused.value) and refused.value.http_status == 400
    assert not marker.exists(), "the module's code never ran"
    for spec in ("os:getcwd", "magnetar.cli:main", "antigravity:geohash"):
        with pytest.raises(InvalidViewError, match="views_python_path"):
            load_function(spec, roots=[trusted])


def test_a_symbolic_link_out_of_the_path_is_refused(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    trusted, outside = dirs
    marker = tmp_path / "ran"
    (trusted / "v22_link.py").symlink_to(_module(outside, "v22_target", marker))
    with pytest.raises(InvalidViewError, match="outside the directories of views_python_path"):
        load_function("v22_link:apply", roots=[trusted])
    assert not marker.exists()


def test_a_name_already_imported_from_elsewhere_is_refused(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    trusted, _ = dirs
    _module(trusted, "json", tmp_path / "ran")  # shadows the standard library's
    with pytest.raises(InvalidViewError, match="outside the directories of views_python_path"):
        load_function("json:loads", roots=[trusted])
    assert not (tmp_path / "ran").exists()


def test_without_a_path_python_views_are_disabled() -> None:
    with pytest.raises(InvalidViewError, match="disabled") as refused:
        load_function("tests.views.transforms:balance", roots=[])
    assert "--views-python-path" in str(refused.value)
