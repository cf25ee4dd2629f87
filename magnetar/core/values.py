"""Value classes made by the thousand per second: frozen to the type checker, fast to build.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 1.75 µs
for a seven-field entry against 0.24 µs for a plain slotted class, and every append, read
and dispatched message makes a few (a one-message entry read through the managed ledger
used to make two). :func:`value_class` makes a plain slotted dataclass, hashed and compared like
a frozen one, which mypy treats as frozen: a field assigned after ``__init__`` is a type
error, caught by ``make test`` as any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

_C = TypeVar("_C")


@dataclass_transform(frozen_default=True)
def value_class(*, order: bool = False) -> Callable[[type[_C]], type[_C]]:
    """``@dataclass(frozen=True, slots=True, order=order)`` as mypy sees it."""

    def make(cls: type[_C]) -> type[_C]:
        return dataclass(slots=True, unsafe_hash=True, order=order)(cls)

    return make
