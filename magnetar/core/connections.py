"""Bounds on a listener's connections, shared by the Pulsar and Kafka servers.

- :class:`ConnectionGate` caps the open connections of a listener, in all and per client
  address (Pulsar's ``brokerMaxConnections`` and ``maxConnectionsPerIp``, Kafka's
  ``max.connections`` and ``max.connections.per.ip``). A connection over a cap is closed as
  soon as it is accepted; the connections already open are not touched.
- :class:`PendingLimit` is a connection's back-pressure: requests read and not yet answered,
  and their bytes. At either cap the server stops reading that socket (Pulsar's
  ``maxPendingPublishRequestsPerConnection``); the client's further sends wait in its own
  buffers. Answers keep going out while reading is paused, so what is pending always finishes
  and reading resumes: pausing cannot deadlock.
- :class:`ConnectionLimits` holds the settings; the handshake and idle deadlines are kept by
  each server's connection, as what counts as a handshake differs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass

log = logging.getLogger(__name__)
MiB = 1024 * 1024
_ALL = "*"  # the key of the total cap's refusal episode


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """A listener's connection limits; 0 turns a cap or timeout off where noted."""

    max_connections: int = 10_000  # open connections of the listener (0: no cap)
    max_connections_per_ip: int = 1_000  # open connections from one address (0: no cap)
    handshake_timeout: float = 30.0  # seconds from accept to the handshake
    keep_alive_interval: float = 30.0  # Pulsar: PING an idle connection this often (0: never)
    idle_timeout: float = 600.0  # Kafka: seconds without a request (0: never)
    max_pending_requests: int = 1_000  # publish requests read and not yet answered
    max_pending_bytes: int = 64 * MiB  # ... and their bytes


class ConnectionGate:
    """Counts a listener's open connections and admits a new one only under the caps.

    Refusals are logged once per episode: when an address (or the listener, for the total
    cap) first hits its cap, and with their count when it is under the cap again. A flood of
    connections costs a log line, not one per connection.
    """

    def __init__(self, protocol: str, limits: ConnectionLimits) -> None:
        self.protocol = protocol
        self.max_total = limits.max_connections
        self.max_per_ip = limits.max_connections_per_ip
        self.open = 0
        self.by_ip: Counter[str] = Counter()
        self._refused: dict[str, int] = {}  # address or _ALL → refusals in the open episode

    def admit(self, ip: str) -> bool:
        """Count a connection from ``ip`` and return True, or return False if over a cap."""
        if self.max_total and self.open >= self.max_total:
            self._refuse(_ALL, f"{self.open} connections are open, max_connections is")
            return False
        if self.max_per_ip and self.by_ip[ip] >= self.max_per_ip:
            self._refuse(ip, f"{ip} has {self.by_ip[ip]} connections open, the cap per address")
            return False
        self.open += 1
        self.by_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        """An admitted connection from ``ip`` closed."""
        self.open -= 1
        left = self.by_ip[ip] - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            del self.by_ip[ip]
        if self._refused:
            if ip in self._refused and left < self.max_per_ip:
                self._end_episode(ip)
            if _ALL in self._refused and self.open < self.max_total:
                self._end_episode(_ALL)

    def _refuse(self, key: str, why: str) -> None:
        count = self._refused.get(key)
        if count is None:
            limit = self.max_total if key == _ALL else self.max_per_ip
            log.warning(
                "%s: refusing new connections: %s %d (further refusals logged once it is "
                "under the cap again)",
                self.protocol,
                why,
                limit,
            )
            count = 0
        self._refused[key] = count + 1

    def _end_episode(self, key: str) -> None:
        count = self._refused.pop(key)
        who = "the listener" if key == _ALL else key
        log.warning(
            "%s: %s is under its connection cap again (%d refused)", self.protocol, who, count
        )


class PendingLimit:
    """One connection's requests read but not yet answered, and their bytes.

    :meth:`add` when a request is read, :meth:`done` when it is answered (or needs no
    answer). Reading of ``transport`` pauses when either count reaches its cap and resumes
    when both are at half or below, so a busy client reads in bursts rather than one request
    at a time. A single request larger than the byte cap is still taken (it is admitted
    alone).
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self.paused = False
        self.transport: asyncio.Transport | None = None

    def add(self, size: int) -> None:
        self.requests += 1
        self.bytes += size
        full = self.requests >= self.max_requests or self.bytes >= self.max_bytes
        if full and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True

    def done(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        if not self.paused:
            return
        if self.requests <= self.max_requests // 2 and self.bytes <= self.max_bytes // 2:
            self.paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()


def peer_ip(transport: asyncio.BaseTransport) -> str:
    """The client's address (no port), or "?" when the socket no longer has one."""
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"
