"""Importing a Python view's module only from the directories the operator trusts.

A view definition names ``module:function``, and importing a module runs its code; so the
server looks the module up on the directories of the ``views_python_path`` setting alone
(never ``sys.path``), checks that each file it would run (the module and the packages
above it) lies under one of them once symbolic links are followed, and only then executes
it. Nothing is imported while a name is being refused. With no directory configured,
Python views are refused altogether.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType

from magnetar.views.errors import InvalidViewError

SETTING = "views_python_path"
HOW = (
    f"list the directories holding view modules in the {SETTING} setting "
    "(--views-python-path, MAGNETAR_VIEWS_PYTHON_PATH)"
)


def import_trusted(module_name: str, roots: Sequence[Path]) -> ModuleType:
    """The module ``module_name`` loaded from a file under one of ``roots`` (resolved
    directories); InvalidViewError naming the setting when it is not found there, resolves
    outside them, or is already imported from elsewhere. Exceptions of the module's own code
    propagate."""
    if not roots:
        raise InvalidViewError(f"Python views are disabled on this server: {HOW}")
    specs = locate(module_name, roots)
    for spec in specs[:-1]:
        _load(spec, roots)
    return _load(specs[-1], roots)


def locate(module_name: str, roots: Sequence[Path]) -> list[ModuleSpec]:
    """The specs of the packages leading to ``module_name`` and of the module itself, found
    on ``roots`` only; nothing is executed."""
    parts = module_name.split(".")
    if not all(p.isidentifier() for p in parts):
        raise InvalidViewError(f"bad module name {module_name!r}")
    search = [str(r) for r in roots]
    specs: list[ModuleSpec] = []
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        spec = PathFinder.find_spec(name, search) if search else None
        if spec is None:
            raise InvalidViewError(
                f"cannot import the transformation module {module_name!r}: {name} is not found "
                f"in {SETTING} ({os.pathsep.join(map(str, roots))})"
            )
        _check_under(name, _locations(spec), roots)
        specs.append(spec)
        search = list(spec.submodule_search_locations or [])
    return specs


def _locations(spec: ModuleSpec) -> list[str]:
    """The files and directories importing ``spec`` reads."""
    found = [spec.origin] if spec.has_location and spec.origin else []
    return found + list(spec.submodule_search_locations or [])


def _check_under(name: str, locations: Iterable[str], roots: Sequence[Path]) -> None:
    for location in locations:
        real = Path(location).resolve()
        if not any(real.is_relative_to(root) for root in roots):
            raise InvalidViewError(
                f"module {name} resolves to {real}, outside the directories of {SETTING}: "
                f"refused ({HOW})"
            )


def _load(spec: ModuleSpec, roots: Sequence[Path]) -> ModuleType:
    existing = sys.modules.get(spec.name)
    if existing is not None:  # imported before: fine if from the very same trusted place
        where = getattr(existing, "__spec__", None)
        locations = _locations(where) if where is not None else []
        if not locations:
            raise InvalidViewError(f"module {spec.name} is built into the server: refused")
        _check_under(spec.name, locations, roots)
        return existing
    if spec.loader is None:
        raise InvalidViewError(f"module {spec.name} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    parent, _, child = spec.name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module
