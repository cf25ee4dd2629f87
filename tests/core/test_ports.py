"""Refusals of a port that cannot be bound: what they say, in process."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from magnetar.core.ports import PortUnavailableError, check_free, listening, refusal


def test_a_port_in_use_names_the_setting_flag_variable_and_key() -> None:
    error = refusal("http_port", "0.0.0.0", 8080, OSError(errno.EADDRINUSE, "in use"))
    assert str(error) == (
        "port 8080 (http_port) is already in use on 0.0.0.0:8080: choose another with "
        "--http-port, MAGNETAR_HTTP_PORT or http_port in --config"
    )
    assert refusal("http_port", "h", 1, OSError(errno.ENOMEM, "no memory")) is None


def test_an_address_not_of_this_machine_names_bind_address() -> None:
    error = refusal("pulsar_port", "10.9.9.9", 6650, OSError(errno.EADDRNOTAVAIL, "x"))
    assert error is not None and "--bind-address" in str(error)


async def test_listening_and_check_free_map_a_taken_port() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(PortUnavailableError, match=f"port {port} \\(flight_port\\)"):
            check_free("flight_port", "127.0.0.1", port)

        async def bind() -> None:
            await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", port)

        with pytest.raises(PortUnavailableError, match="--kafka-port"):
            await listening("kafka_port", "127.0.0.1", port, bind())
    check_free("flight_port", "127.0.0.1", 0)  # any free port: nothing to check
