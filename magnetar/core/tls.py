"""TLS contexts for Magnetar's listeners and its own client connections.

Pulsar serves TLS on separate ports (``brokerServicePortTls`` 6651, ``webServicePortTls``
8443) with one certificate, key and trust file for all of them, and may require a trusted
client certificate (``tlsRequireTrustedClientCertOnConnect``); Kafka adds an ``SSL``
listener. :class:`TlsFiles` holds those three files and that choice; the contexts come from
Python's :mod:`ssl` (OpenSSL), never from code of our own. A file that is missing or does not
hold what it should is a :class:`ConfigError` naming the setting, raised when the node
starts, before any port is opened.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.core.errors import ConfigError

# OpenSSL's default protocols and ciphers are kept; only versions below TLS 1.2 are refused
# (Pulsar's default tlsProtocols lets the JVM choose, which refuses them too).
MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The PEM files of a node's TLS listeners."""

    certificate: Path  # the node's certificate chain (tls_certificate_file)
    key: Path  # its private key, unencrypted (tls_key_file)
    trust: Path | None = None  # CA certificates client certificates are checked against
    require_client_cert: bool = False  # refuse a client without a trusted certificate

    def server_context(self) -> ssl.SSLContext:
        """A context for a listening socket. A trust file makes a client certificate, when
        one is sent, verified (and so usable as the client's identity); with
        ``require_client_cert`` a client without a trusted one fails the handshake."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = MINIMUM_VERSION
        _load_chain(ctx, self.certificate, self.key)
        if self.trust is not None:
            _load_trust(ctx, self.trust)
            ctx.verify_mode = ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
        return ctx

    def client_context(self, *, check_hostname: bool = True) -> ssl.SSLContext:
        """A context for this node's own connections to other nodes: the server is checked
        against the trust file (the system's CAs without one), and this node's certificate
        is offered, for peers that require one."""
        return client_context(
            self.trust, (self.certificate, self.key), check_hostname=check_hostname
        )


def client_context(
    trust: Path | None, chain: tuple[Path, Path] | None, *, check_hostname: bool = False
) -> ssl.SSLContext:
    """A context for a node's connections to its peers (brokers, storage nodes): the server
    is checked against ``trust`` (the system's CAs without one); ``chain`` (certificate,
    key) is offered to peers that require a client certificate. Peers are reached at the
    addresses they register, which a cluster's certificates often leave out, so by default
    the chain is checked and the name is not (Pulsar's tlsHostnameVerificationEnabled=false)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = MINIMUM_VERSION
    ctx.check_hostname = check_hostname
    if trust is not None:
        _load_trust(ctx, trust)
    if chain is not None:
        _load_chain(ctx, *chain)
    return ctx


def peer_common_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The CN of the verified client certificate of a TLS connection, None without one."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    subject: Any = cert.get("subject", ())
    for rdn in subject:  # ((("commonName", "alice"),), ...)
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _load_chain(ctx: ssl.SSLContext, certificate: Path, key: Path) -> None:
    for setting, path in (("tls_certificate_file", certificate), ("tls_key_file", key)):
        if not path.is_file():
            raise ConfigError(setting, f"file {str(path)!r} does not exist")
    try:
        ctx.load_cert_chain(certificate, key)
    except ssl.SSLError as e:
        raise ConfigError(
            "tls_certificate_file",
            f"{certificate} and {key} are not a PEM certificate and its unencrypted private "
            f"key ({e.reason or e})",
        ) from None


def _load_trust(ctx: ssl.SSLContext, trust: Path) -> None:
    if not trust.is_file():
        raise ConfigError("tls_trust_certs_file", f"file {str(trust)!r} does not exist")
    try:
        ctx.load_verify_locations(cafile=trust)
    except ssl.SSLError as e:
        raise ConfigError(
            "tls_trust_certs_file", f"{trust} holds no PEM certificate ({e.reason or e})"
        ) from None
