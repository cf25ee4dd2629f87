"""The HTTP listener's connection caps: the same :class:`ConnectionGate` as the Pulsar and
Kafka listeners (``max_connections`` in all, ``max_connections_per_ip`` per address), counted
on aiohttp's low-level server. A connection over a cap is closed as soon as it is accepted;
those already open are not touched, and refusals are logged once per episode."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from magnetar.core.connections import ConnectionGate, peer_ip


def gate_connections(server: web.Server, gate: ConnectionGate) -> None:
    """Count every connection of ``server`` (HTTP and HTTPS sites alike) against ``gate``."""
    made, lost = server.connection_made, server.connection_lost
    admitted: dict[int, str] = {}  # id(handler) → the address it was counted for

    def connection_made(handler: Any, transport: asyncio.Transport) -> None:
        made(handler, transport)
        ip = peer_ip(transport)
        if gate.admit(ip):
            admitted[id(handler)] = ip
        else:
            transport.close()  # aiohttp then sees the connection lost, as any other

    def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
        ip = admitted.pop(id(handler), None)
        if ip is not None:
            gate.release(ip)
        lost(handler, exc)

    # the server calls these on itself for each connection (aiohttp's RequestHandler)
    setattr(server, "connection_made", connection_made)  # noqa: B010
    setattr(server, "connection_lost", connection_lost)  # noqa: B010
