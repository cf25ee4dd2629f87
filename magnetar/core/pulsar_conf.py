"""Pulsar's broker.conf / standalone.conf keys, read as Magnetar settings.

A user's existing Pulsar configuration mostly just works: ``--pulsar-conf FILE`` reads a
Java properties file (``key=value``, ``#`` comments), and the same camelCase keys are
accepted in the TOML ``--config`` file. Keys Magnetar has an equivalent for are translated
(:data:`KEYS`); the hundreds of others (BookKeeper, load balancer ...) are ignored and
counted, so that a whole standalone.conf can be passed. Empty values mean "Pulsar's
default" and are skipped. ``brokerServicePortTls`` or ``webServicePortTls`` turns the TLS
listeners on, as they do in Pulsar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from magnetar.core.errors import ConfigError

KEYS = {
    "brokerServicePort": "pulsar_port",
    "webServicePort": "http_port",
    "bindAddress": "bind_address",
    "advertisedAddress": "advertised_address",
    "maxMessageSize": "max_message_size",
    "tlsEnabled": "tls_enabled",
    "brokerServicePortTls": "pulsar_tls_port",
    "webServicePortTls": "https_port",
    "tlsCertificateFilePath": "tls_certificate_file",
    "tlsKeyFilePath": "tls_key_file",
    "tlsTrustCertsFilePath": "tls_trust_certs_file",
    "tlsRequireTrustedClientCertOnConnect": "tls_require_trusted_client_cert",
    "authenticationEnabled": "authentication_enabled",
    "authenticationProviders": "authentication_providers",
    "authenticationRefreshCheckSeconds": "authentication_refresh_check_seconds",
    "authorizationEnabled": "authorization_enabled",
    "superUserRoles": "superuser_roles",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",  # Kafka's name
    "brokerClientAuthenticationParameters": "broker_client_auth_token",
    "brokerClientTlsEnabled": "broker_client_tls_enabled",
    "brokerClientTrustCertsFilePath": "broker_client_trust_certs_file",
    "brokerClientCertificateFilePath": "broker_client_certificate_file",
    "brokerClientKeyFilePath": "broker_client_key_file",
    "tokenSecretKey": "token_secret_key",
    "tokenPublicKey": "token_public_key",
    "tokenAuthClaim": "token_auth_claim",
    "basicAuthConf": "basic_auth_conf",
    "anonymousUserRole": "anonymous_user_role",
}
_TLS_PORTS = ("brokerServicePortTls", "webServicePortTls")


def translate(
    values: dict[str, Any], *, ignore_unknown: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Pulsar keys → settings; (settings, ignored keys). Setting names pass through; with
    ``ignore_unknown`` (a whole broker.conf), Pulsar keys without an equivalent are left
    out, else they pass through too (and are refused as unknown settings)."""
    settings: dict[str, Any] = {}
    ignored = []
    for key, value in values.items():
        if value in ("", None):
            continue
        if key in KEYS:
            settings[KEYS[key]] = value
            if key in _TLS_PORTS:
                settings.setdefault("tls_enabled", True)
        elif ignore_unknown and key[:1].islower() and any(c.isupper() for c in key):
            ignored.append(key)  # a Pulsar key with no Magnetar equivalent
        else:
            settings[key] = value
    return settings, ignored


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file as Pulsar writes them (no line continuations)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ConfigError("pulsar_conf", f"cannot read {str(path)!r}: {e.strerror}") from None
    found = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError("pulsar_conf", f"{path} line {number}: expected key=value")
        found[key.strip()] = value.strip()
    return found


def read_pulsar_conf(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The settings ``path`` (broker.conf / standalone.conf) gives, and the keys ignored."""
    return translate(dict(read_properties(path)), ignore_unknown=True)
