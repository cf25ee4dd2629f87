"""Listening on a configured port, with a refusal a user can act on.

A port that is taken (or not ours to use) is the commonest reason a node does not start;
the OS's answer, raised from deep inside asyncio or gRPC, names neither the setting nor
how to change it. :func:`listening` and :func:`check_free` turn it into one
:class:`PortUnavailableError` whose message names the port, the address, and the flag,
``MAGNETAR_*`` variable and TOML key that move it.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Awaitable
from typing import TypeVar

from magnetar.core.errors import MagnetarError

T = TypeVar("T")


class PortUnavailableError(MagnetarError):
    """A listener could not bind its port; nothing was left listening. Free the port or
    choose another with the setting the message names."""

    code = "config.port_unavailable"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


def how_to_set(setting: str) -> str:
    """``--pulsar-port, MAGNETAR_PULSAR_PORT or pulsar_port in the --config file``."""
    return f"--{setting.replace('_', '-')}, MAGNETAR_{setting.upper()} or {setting} in --config"


def refusal(setting: str, host: str, port: int, error: OSError) -> PortUnavailableError | None:
    """The error to raise for a failed bind of ``setting``'s port, None if it is another
    kind of failure."""
    where = f"{host or '*'}:{port}"
    if error.errno == errno.EADDRINUSE:
        problem = f"port {port} ({setting}) is already in use on {where}"
    elif error.errno == errno.EACCES:
        problem = f"port {port} ({setting}) on {where} needs privileges this process lacks"
    elif error.errno == errno.EADDRNOTAVAIL:
        return PortUnavailableError(
            f"cannot listen on {where}: {host} is not an address of this machine; "
            f"set another with {how_to_set('bind_address')}"
        )
    else:
        return None
    return PortUnavailableError(f"{problem}: choose another with {how_to_set(setting)}")


async def listening(setting: str, host: str, port: int, start: Awaitable[T]) -> T:
    """Await ``start`` (a server binding ``host:port``); PortUnavailableError if it cannot."""
    try:
        return await start
    except OSError as e:
        mapped = refusal(setting, host, port, e)
        if mapped is None:
            raise
        raise mapped from None


def check_free(setting: str, host: str, port: int) -> None:
    """Raise PortUnavailableError unless ``host:port`` can be bound now (for servers whose
    own failure does not say why, such as gRPC's). Port 0 (any free port) always can."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            probe.bind((host, port))
        except OSError as e:
            mapped = refusal(setting, host, port, e)
            if mapped is None:
                raise
            raise mapped from None
