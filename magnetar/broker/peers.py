"""Calls one broker makes to another (several brokers sharing ZooKeeper and storage nodes).

A broker asks the broker owning a partition for its Spark plan, forwards a Kafka group's
offset commit to the broker serving the partition, and asks a broker to unload a bundle
(a namespace unload, load shedding). With authentication on, each such call presents the
node's own client credential (``broker_client_auth_token``, Pulsar's
``brokerClientAuthenticationParameters``), whose role must be a super-user on the other
brokers. With ``broker_client_tls_enabled`` (Pulsar's ``brokerClientTlsEnabled``) the calls
go to the other broker's ``https://`` address, checked against the node's trust file and
offering the node's own certificate (for brokers that require one).

A call made on behalf of a client names the client's role in ``X-Original-Principal`` (the
header Pulsar's proxy sends): the other broker, trusting it only from a super-user, checks
and answers as for that role — so a Spark plan's Flight read grant for a partition is signed
by the broker that owns it, under its own secret, for the role that asked.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import aiohttp

from magnetar.broker.ownership import BrokerInfo

ORIGINAL_PRINCIPAL = "X-Original-Principal"


@dataclass(frozen=True, slots=True)
class Peers:
    """How this broker reaches the others: credential and transport."""

    token: str | None = None  # the node's client credential (a JWT); None: none sent
    ssl_context: ssl.SSLContext | None = None  # set: call the others over https://

    def base_url(self, other: BrokerInfo) -> str:
        """``other``'s HTTP address: https:// when calls go over TLS and it has one."""
        return other.https if self.ssl_context is not None and other.https else other.http

    def headers(self, on_behalf_of: str | None = None) -> dict[str, str]:
        found = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if on_behalf_of:
            found[ORIGINAL_PRINCIPAL] = on_behalf_of
        return found

    def session(self, timeout_s: float = 10.0) -> aiohttp.ClientSession:
        """A client session for calls to other brokers (inside a running loop)."""
        connector = aiohttp.TCPConnector(ssl=self.ssl_context) if self.ssl_context else None
        return aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers=self.headers(),
            connector=connector,
        )
