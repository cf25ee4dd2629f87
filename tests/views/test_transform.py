"""The Python fold without Spark: order, deletes, failures naming the event, key lookup."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.testing.server import REPO
from magnetar.views.errors import InvalidViewError, TransformError
from magnetar.views.model import ViewDefinition, key_text
from magnetar.views.transform import fold, key_values, load_function
from tests.views import helpers as h
from tests.views.transforms import balance, close_account, explode_on_13


def _events(items: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [
        {"topic": "t", "partition": 0, "offset": i, "key": None, "data": {"user": u, "amount": a}}
        for i, (u, a) in enumerate(items)
    ]


def test_fold_is_order_sensitive_and_equals_a_single_pass() -> None:
    items = h.events(500, seed=3)
    result = fold(_events(items), ("user",), balance, lambda keys: {})
    assert result.upserts == h.balances(items)
    swapped = [("u0", -5), ("u0", 10)]
    assert fold(_events(swapped), ("user",), balance, lambda k: {}).upserts["u0"]["refused"] == 1


def test_fold_continues_from_stored_state_in_batches() -> None:
    items = h.events(300, seed=4)
    stored: dict[str, dict[str, Any]] = {}
    for start in range(0, 300, 70):
        chunk = _events(items)[start : start + 70]
        result = fold(
            chunk, ("user",), balance, lambda keys: {k: stored[k] for k in keys if k in stored}
        )
        stored.update(result.upserts)
    assert stored == h.balances(items)


def test_returning_none_deletes_the_key() -> None:
    result = fold(
        _events([("a", 5), ("a", 0)]),
        ("user",),
        close_account,
        lambda k: {"a": {"balance": 1, "refused": 0, "applied": 1}},
    )
    assert result.deletes == {"a"} and result.upserts == {}
    fresh = fold(_events([("b", 5), ("b", 0)]), ("user",), close_account, lambda k: {})
    assert fresh.deletes == set() and fresh.upserts == {}


def test_a_raising_transformation_names_the_event() -> None:
    with pytest.raises(TransformError, match="offset 2") as failed:
        fold(_events([("a", 1), ("b", 2), ("a", 13)]), ("user",), explode_on_13, lambda k: {})
    assert failed.value.at == {"topic": "t", "partition": 0, "offset": 2}


def test_key_columns_resolve_in_data_then_columns() -> None:
    event = {"topic": "t", "partition": 1, "offset": 7, "key": "k", "data": {"user": "u"}}
    assert key_values(event, ["user", "key", "data.user", "partition"]) == ["u", "k", "u", 1]
    with pytest.raises(TransformError, match="'nope'"):
        key_values(event, ["nope"])
    assert key_text(["alice"]) == "alice" and key_text([3]) == "3"
    assert key_text(["a", 1]) == '["a",1]'


def test_load_function_errors_are_clear() -> None:
    roots = [REPO]
    assert load_function("tests.views.transforms:balance", roots=roots) is balance
    with pytest.raises(InvalidViewError, match="cannot import"):
        load_function("tests.views.transforms:missing", roots=roots)
    with pytest.raises(InvalidViewError, match="not callable"):
        load_function("tests.views.transforms:NOT_CALLABLE", roots=roots)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"source": "t", "key": "k"}, "exactly one transformation"),
        ({"source": "t", "key": "k", "sql": "x", "python": "a:b"}, "exactly one"),
        ({"source": "t", "key": "k", "python": "nocolon"}, "module:function"),
        ({"source": [], "key": "k", "sql": "x"}, "source"),
        ({"source": "t", "key": ["k", "k"], "sql": "x"}, "twice"),
        ({"source": "t", "key": "k", "sql": "x", "extra": 1}, "unknown field"),
        ("not an object", "JSON object"),
    ],
)
def test_definitions_are_validated(body: Any, reason: str) -> None:
    with pytest.raises(InvalidViewError, match=reason):
        ViewDefinition.parse("v", body)
    with pytest.raises(InvalidViewError, match="bad view name"):
        ViewDefinition.parse("a__b", {"source": "t", "key": "k", "sql": "x"})
