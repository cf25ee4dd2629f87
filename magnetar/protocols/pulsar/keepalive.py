"""A Pulsar connection's handshake rule and keep-alive, as Pulsar's broker keeps them.

- Before CONNECT nothing is served: any other command is answered with an ERROR
  (NotAllowedError, the command's request id when it has one) and the connection closes.
- After CONNECT, every keep-alive interval (Pulsar's ``keepAliveIntervalSeconds``, 30 s) a
  connection that sent nothing during the interval is sent a PING; if it still has sent
  nothing (a PONG or anything else) when the next interval ends, it is closed. A client that
  talks, or answers PINGs, stays connected however long it is idle.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from magnetar.protocols.pulsar import responses
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import Frame

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type
NO_REQUEST_ID = (1 << 64) - 1  # the request id of an ERROR for a command that has none


class _Connection(Protocol):
    transport: asyncio.Transport | None

    @property
    def peer(self) -> str: ...

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


def refuse_before_connect(conn: _Connection, frame: Frame) -> None:
    """Answer a command sent before CONNECT with an ERROR and close the connection."""
    name = T.Name(frame.type)
    request_id = None
    for field, value in frame.command.ListFields():  # the command's body (beside its type)
        if field.name != "type":
            request_id = getattr(value, "request_id", None)
    log.info("closing Pulsar connection %s: %s before CONNECT", conn.peer, name)
    conn.write(
        responses.error(
            NO_REQUEST_ID if request_id is None else request_id,
            pb.ServerError.NotAllowedError,
            f"{name} before CONNECT: a client sends CONNECT first",
        )
    )
    conn.close()


class KeepAlive:
    """PINGs an idle connection every ``interval`` seconds; closes one that stays silent for
    the interval after a PING. :meth:`heard` on every byte received; :meth:`start` once
    CONNECT is answered; :meth:`stop` when the connection is lost."""

    def __init__(self, conn: _Connection, interval: float) -> None:
        self.conn = conn
        self.interval = interval
        self._heard = False  # the client sent something during the current interval
        self._pinged = False  # a PING went out at the end of the last interval
        self._timer: asyncio.TimerHandle | None = None

    def heard(self) -> None:
        self._heard = True

    def start(self) -> None:
        if self._timer is None and self.interval > 0 and self._open:
            self._schedule()

    @property
    def _open(self) -> bool:
        return self.conn.transport is not None and not self.conn.transport.is_closing()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if not self._open:
            return
        if self._heard:
            self._heard = self._pinged = False
        elif self._pinged:
            log.info(
                "closing Pulsar connection %s: no answer to a PING within %.0f s "
                "(keep_alive_interval_seconds)",
                self.conn.peer,
                self.interval,
            )
            self.conn.close()
            return
        else:
            self.conn.write(responses.ping())
            self._pinged = True
        self._schedule()
