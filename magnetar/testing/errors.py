"""Every :class:`MagnetarError` class, for the table tests of the servers' error mappings.

A test that walks :func:`error_classes` covers a class added later without being told:
importing every module of the package first registers every subclass there is.
(``tests/errors_table.py`` turns the walk into one test case per class.)
"""

from __future__ import annotations

import importlib
import pkgutil

import magnetar
from magnetar.core.errors import MagnetarError


def error_classes() -> list[type[MagnetarError]]:
    """MagnetarError and all its subclasses in the package, by module and name."""
    for module in pkgutil.walk_packages(magnetar.__path__, "magnetar."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, stack = set(), [MagnetarError]
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith("magnetar.") and cls not in found:
            found.add(cls)
            stack.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


WIRE_CODES = ("http_status", "pulsar_error", "kafka_error")


def error_id(cls: type[MagnetarError]) -> str:
    """The test id of ``cls``'s case: ``module.QualName``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def declared_by(cls: type[MagnetarError], wire_code: str) -> type:
    """The class in ``cls``'s MRO whose body sets ``wire_code`` (one of :data:`WIRE_CODES`)."""
    return next(c for c in cls.__mro__ if wire_code in vars(c))


def declares_wire_codes(cls: type[MagnetarError]) -> bool:
    """False when ``cls`` takes every wire code from MagnetarError's defaults (no class
    between them declares one): an error nobody decided how to answer on any wire."""
    return cls is MagnetarError or any(
        declared_by(cls, name) is not MagnetarError for name in WIRE_CODES
    )


def bare(cls: type[MagnetarError]) -> MagnetarError:
    """An instance of ``cls`` without its constructor (they take different arguments): the
    mappings read only the class and its flags."""
    error = cls.__new__(cls)
    error.message = f"a {cls.__name__}"
    return error
