"""A call about a view another broker leads is redirected to that broker: to its HTTPS address
when the call came over TLS and the leader serves HTTPS, else to its HTTP address."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from magnetar.views.errors import ViewMovedError
from magnetar.views.http import _errors
from magnetar.views.leader import Leader


def _redirect(secure: bool, https: str) -> str:
    leader = Leader("b2", "http://h2:8080", 3, https)

    @_errors
    async def handler(request: web.Request) -> web.StreamResponse:
        raise ViewMovedError("view 'v' runs on broker b2", leader.http, leader.https)

    request = make_mocked_request("GET", "/views/v/status?x=1", sslcontext=True if secure else None)
    with pytest.raises(web.HTTPTemporaryRedirect) as moved:
        asyncio.run(handler(request))
    return str(moved.value.location)


def test_a_tls_call_goes_to_the_leaders_https_address() -> None:
    assert _redirect(True, "https://h2:8443") == "https://h2:8443/views/v/status?x=1"


def test_a_clear_call_goes_to_the_leaders_http_address() -> None:
    assert _redirect(False, "https://h2:8443") == "http://h2:8080/views/v/status?x=1"


def test_a_leader_without_https_is_reached_over_http() -> None:
    assert _redirect(True, "") == "http://h2:8080/views/v/status?x=1"


def test_the_leader_record_keeps_its_https_address() -> None:
    leader = Leader("b2", "http://h2:8080", 3, "https://h2:8443")
    assert leader.to_json() == {
        "broker": "b2", "http": "http://h2:8080", "https": "https://h2:8443", "epoch": 3
    }  # fmt: skip
