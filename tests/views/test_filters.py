"""Key filters of ``GET /views/{name}/rows``, in process: what is accepted, what is refused
and that a refusal names the view's columns."""

from __future__ import annotations

import pytest

from magnetar.views.errors import InvalidViewError
from magnetar.views.filters import column_types_of_row, key_filter

SHOP = {"user_id": "string", "day": "bigint", "total": "double", "vip": "boolean"}


def test_no_filter_means_the_first_rows() -> None:
    assert key_filter("shop", {}, ["user_id"], SHOP) is None


def test_key_values_take_their_columns_types() -> None:
    assert key_filter("shop", {"user_id": "00042"}, ["user_id"], SHOP) == ["00042"]
    got = key_filter("shop", {"day": "7", "user_id": "u1"}, ["user_id", "day"], SHOP)
    assert got == ["u1", 7]
    assert key_filter("shop", {"vip": "TRUE"}, ["vip"], SHOP) == [True]
    assert key_filter("shop", {"total": "2"}, ["total"], SHOP) == [2.0]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"user": "u00042"}, ["unknown column(s) ['user']", "user_id string", "total double"]),
        ({"total": "3"}, ["['total'] are not key columns", "['user_id']"]),
        ({"user_id": "u1", "user": "u2"}, ["unknown column(s) ['user']"]),
    ],
)
def test_unknown_and_non_key_columns_are_refused_naming_the_columns(
    query: dict[str, str], words: list[str]
) -> None:
    with pytest.raises(InvalidViewError) as refused:
        key_filter("shop", query, ["user_id"], SHOP)
    for word in words:
        assert word in str(refused.value)
    assert "?user_id=VALUE" in str(refused.value)


def test_a_partial_key_is_refused() -> None:
    with pytest.raises(InvalidViewError, match=r"\['day'\] missing"):
        key_filter("shop", {"user_id": "u1"}, ["user_id", "day"], SHOP)


@pytest.mark.parametrize(("query", "kind"), [({"day": "u1"}, "bigint"), ({"vip": "yes"}, "bool")])
def test_a_value_of_the_wrong_type_is_refused(query: dict[str, str], kind: str) -> None:
    with pytest.raises(InvalidViewError, match=kind):
        key_filter("shop", query, list(query), SHOP)


def test_types_from_a_stored_row_and_unknown_types() -> None:
    types = column_types_of_row({"user": "u1", "n": 3, "avg": 1.5, "ok": False, "x": None})
    assert types == {"user": "string", "n": "integer", "avg": "number", "ok": "boolean", "x": None}
    with pytest.raises(InvalidViewError, match="which is integer"):
        key_filter("v", {"n": "three"}, ["n"], types)
    # an empty view: only the key is known, values are taken as JSON scalars or text
    assert key_filter("v", {"k": "12"}, ["k"], {}) == [12]
    assert key_filter("v", {"k": "u12"}, ["k"], {}) == ["u12"]
    with pytest.raises(InvalidViewError, match="unknown column"):
        key_filter("v", {"user": "u12"}, ["k"], {})
