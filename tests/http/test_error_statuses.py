"""Every MagnetarError has an HTTP status; a retriable one is answered 503 with Retry-After
and a JSON body (table over every class, then through a real aiohttp server and client)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from magnetar.broker import errors as be
from magnetar.broker.admin import PreconditionFailedError
from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.http.bodies import BodyTooLargeError
from magnetar.http.errors import RETRY_AFTER_S, error_response, status_of
from magnetar.http.server import errors_as_json
from magnetar.storage.errors import DiskFullError
from magnetar.testing.errors import bare
from magnetar.testing.server import free_port
from magnetar.views.errors import ViewNotFoundError
from tests.errors_table import EVERY_ERROR_CLASS


@EVERY_ERROR_CLASS
def test_every_error_class_has_a_status_and_a_json_body(cls: type[MagnetarError]) -> None:
    assert 300 <= cls.http_status <= 599
    answer = error_response(bare(cls))
    assert answer.content_type == "application/json"
    assert json.loads(answer.text or "")["code"] == cls.code
    if cls.retriable:
        assert answer.status == 503 and answer.headers["Retry-After"] == str(RETRY_AFTER_S)
    else:
        assert answer.status == cls.http_status and "Retry-After" not in answer.headers


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (PreconditionFailedError, 412),
        (be.TooManyTopicsError, 412),
        (be.PartitionCountError, 406),
        (BodyTooLargeError, 413),
        (be.TopicNotFoundError, 404),
        (be.AlreadyExistsError, 409),
        (be.NotEmptyError, 409),
        (be.IncompatibleSchemaError, 409),
        (InvalidNameError, 412),
        (be.InvalidRequestError, 400),
        (ViewNotFoundError, 404),
        (be.TopicFencedError, 503),
        (DiskFullError, 503),
        (MagnetarError, 500),
    ],
)
def test_what_http_clients_are_answered(error: type[MagnetarError], status: int) -> None:
    assert status_of(bare(error)) == status


async def test_a_real_server_answers_retriable_503_and_final_errors_as_declared() -> None:
    async def full(request: web.Request) -> web.Response:
        raise DiskFullError("the journal's disk is full (12 MiB free); retry later")

    async def missing(request: web.Request) -> web.Response:
        raise be.TopicNotFoundError("topic persistent://public/default/x does not exist")

    app = web.Application(middlewares=[errors_as_json])
    app.router.add_get("/full", full)
    app.router.add_get("/missing", missing)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as client:
            async with client.get(f"http://127.0.0.1:{port}/full") as r:
                body = await r.json()
                assert (r.status, r.headers["Retry-After"]) == (503, "1")
                assert body == {
                    "reason": "the journal's disk is full (12 MiB free); retry later",
                    "code": "storage.disk_full",
                    "retriable": True,
                }
            async with client.get(f"http://127.0.0.1:{port}/missing") as r:
                assert r.status == 404 and "Retry-After" not in r.headers
                assert (await r.json())["retriable"] is False
    finally:
        await asyncio.wait_for(runner.cleanup(), 10)
