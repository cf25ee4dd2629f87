"""A broker's calls to another (:mod:`magnetar.broker.peers`): over TLS they go to its
https:// address, offering the node's certificate to a listener that requires one, with the
node's token; without TLS to its http:// address."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from magnetar.broker.ownership import BrokerInfo
from magnetar.broker.peers import ORIGINAL_PRINCIPAL, Peers
from magnetar.core.tls import TlsFiles, client_context, peer_common_name
from magnetar.testing.certs import TestCA
from magnetar.testing.server import free_port


def _info(http: str, https: str) -> BrokerInfo:
    return BrokerInfo("b:1", "pulsar://b:1", http, "b:2", https=https)


def test_calls_go_to_https_only_over_tls() -> None:
    other = _info("http://b:8080", "https://b:8443")
    assert Peers("t").base_url(other) == "http://b:8080"
    assert Peers("t", client_context(None, None)).base_url(other) == "https://b:8443"
    assert Peers(None, client_context(None, None)).base_url(_info("http://b:8080", "")) == (
        "http://b:8080"
    )
    assert Peers("t").headers("bob") == {"Authorization": "Bearer t", ORIGINAL_PRINCIPAL: "bob"}
    assert Peers().headers() == {}


def test_a_call_over_mtls_offers_the_node_certificate(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    server, broker = ca.server(), ca.client("broker")
    listener = TlsFiles(server.cert, server.key, ca.cert, require_client_cert=True)
    port = free_port()
    seen: list[tuple[str | None, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        cn = peer_common_name(request.transport.get_extra_info("ssl_object"))  # type: ignore[union-attr]
        seen.append((cn, request.headers.get("Authorization")))
        return web.json_response({})

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/x", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=listener.server_context()).start()
        try:
            peers = Peers("tok", client_context(ca.cert, (broker.cert, broker.key)))
            other = _info(f"http://127.0.0.1:{free_port()}", f"https://127.0.0.1:{port}")
            async with peers.session() as http, http.get(f"{peers.base_url(other)}/x") as r:
                assert r.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(run())
    assert seen == [("broker", "Bearer tok")]
