"""Who a client is: authentication providers and the authenticator every listener asks.

Each provider is switched on by name (``authentication_providers``), as Pulsar's provider
classes are: ``token`` (JWT, :mod:`magnetar.core.tokens`), ``basic`` (user and password
against an htpasswd-style file), ``tls`` (the CN of a verified client certificate). A
listener hands the authenticator the method the client chose and its credential; the answer
is an :class:`Identity` (role, and when the credential expires) or an
:class:`AuthenticationError`, which the listener turns into its protocol's refusal (Pulsar
``AuthenticationError``, Kafka ``SASL_AUTHENTICATION_FAILED``, HTTP 401) and closes. Secrets
are never put in a message or a log line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from magnetar.core.errors import ConfigError, MagnetarError
from magnetar.core.tokens import TokenError, TokenVerifier, read_key

# Pulsar's provider classes (authenticationProviders) and the names Magnetar gives them
PULSAR_PROVIDERS = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
}
PROVIDERS = ("token", "basic", "tls")


class AuthenticationError(MagnetarError):
    """The client's credential is missing, malformed, wrong or expired. The connection is
    refused; nothing it asked for was done."""

    code = "auth.failed"
    http_status = 401
    pulsar_error = "AuthenticationError"
    kafka_error = "SASL_AUTHENTICATION_FAILED"


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    method: str  # the provider that vouched for it: token, basic, tls
    expires_at: float | None = None  # epoch seconds when the credential stops being valid


class Provider(Protocol):
    method: str

    def authenticate(self, data: bytes, peer_cn: str | None) -> Identity: ...


class TokenProvider:
    method = "token"

    def __init__(self, verifier: TokenVerifier, claim: str = "sub") -> None:
        self.verifier = verifier
        self.claim = claim

    def authenticate(self, data: bytes, peer_cn: str | None) -> Identity:
        token = data.decode("ascii", "replace").strip()
        if token.startswith("token:"):  # pulsar-client's "token:<jwt>" parameter form
            token = token[len("token:") :]
        if not token:
            raise AuthenticationError("no token was sent")
        try:
            claims = self.verifier.verify(token, self.claim)
        except TokenError as e:
            raise AuthenticationError(str(e)) from None
        return Identity(claims.role, self.method, claims.expires_at)


class TlsProvider:
    method = "tls"

    def authenticate(self, data: bytes, peer_cn: str | None) -> Identity:
        if not peer_cn:
            raise AuthenticationError(
                "no trusted client certificate: connect over TLS with a certificate signed "
                "by a CA in tls_trust_certs_file"
            )
        return Identity(peer_cn, self.method)


class BasicProvider:
    """Users and password hashes from an htpasswd-style file (``user:hash`` lines): Apache
    MD5 (``$apr1$``, ``htpasswd -m``) and SHA-1 (``{SHA}``, ``htpasswd -s``)."""

    method = "basic"

    def __init__(self, path: Path) -> None:
        self.users = read_htpasswd(path)

    def authenticate(self, data: bytes, peer_cn: str | None) -> Identity:
        user, sep, password = data.decode("utf-8", "replace").partition(":")
        if not sep or not user:
            raise AuthenticationError("basic credentials must be user:password")
        stored = self.users.get(user)
        if stored is None or not check_password(password, stored):
            raise AuthenticationError(f"unknown user {user!r} or wrong password")
        return Identity(user, self.method)


class Authenticator:
    """The providers a node accepts, by method name."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self.providers = dict(providers)

    @property
    def methods(self) -> list[str]:
        return sorted(self.providers)

    def authenticate(self, method: str, data: bytes, peer_cn: str | None = None) -> Identity:
        provider = self.providers.get(method)
        if provider is None:
            raise AuthenticationError(
                f"authentication method {method or 'none'!r} is not accepted here; "
                f"use one of: {', '.join(self.methods)}"
            )
        return provider.authenticate(data, peer_cn)

    def from_http_header(self, header: str | None, peer_cn: str | None) -> Identity:
        """The identity an HTTP ``Authorization`` header (Bearer or Basic) or, without one,
        the client certificate proves."""
        if not header:
            if peer_cn and "tls" in self.providers:
                return self.authenticate("tls", b"", peer_cn)
            raise AuthenticationError(
                "authentication required: send Authorization: Bearer <token> "
                f"(accepted methods: {', '.join(self.methods)})"
            )
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer":
            return self.authenticate("token", value.encode(), peer_cn)
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True)
            except ValueError:
                raise AuthenticationError("Basic credentials are not base64") from None
            return self.authenticate("basic", decoded, peer_cn)
        raise AuthenticationError(f"unknown Authorization scheme {scheme!r}: use Bearer or Basic")


def build_authenticator(
    providers: str,
    *,
    token_secret_key: str = "",
    token_public_key: str = "",
    token_auth_claim: str = "sub",
    basic_auth_conf: str = "",
) -> Authenticator:
    """The authenticator ``providers`` (comma-separated, our names or Pulsar's classes)
    asks for; ConfigError naming the setting that is missing or wrong."""
    found: dict[str, Provider] = {}
    for name in filter(None, (p.strip() for p in providers.split(","))):
        name = PULSAR_PROVIDERS.get(name, name)
        if name == "token":
            found[name] = TokenProvider(
                _verifier(token_secret_key, token_public_key), token_auth_claim
            )
        elif name == "basic":
            if not basic_auth_conf:
                raise ConfigError("basic_auth_conf", "the basic provider needs an htpasswd file")
            found[name] = BasicProvider(Path(basic_auth_conf.removeprefix("file://")))
        elif name == "tls":
            found[name] = TlsProvider()
        else:
            raise ConfigError(
                "authentication_providers",
                f"unknown provider {name!r}: use {', '.join(PROVIDERS)} or Pulsar's class names",
            )
    if not found:
        raise ConfigError("authentication_providers", "authentication needs a provider")
    return Authenticator(found)


def _verifier(secret: str, public: str) -> TokenVerifier:
    if secret:
        return TokenVerifier(secret=read_key("token_secret_key", secret))
    if public:
        return TokenVerifier(public=read_key("token_public_key", public))
    raise ConfigError("token_secret_key", "the token provider needs token_secret_key or "
                      "token_public_key")  # fmt: skip


def read_htpasswd(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ConfigError("basic_auth_conf", f"cannot read {str(path)!r}: {e.strerror}") from None
    users = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        user, sep, stored = line.strip().partition(":")
        if not sep or not stored.startswith(("$apr1$", "{SHA}")):
            raise ConfigError(
                "basic_auth_conf",
                f"{path} line {number}: expected user:$apr1$... or user:{{SHA}}... "
                "(htpasswd -m or -s)",
            )
        users[user] = stored
    return users


def check_password(password: str, stored: str) -> bool:
    if stored.startswith("{SHA}"):
        digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
        return hmac.compare_digest(digest, stored[5:])
    salt = stored.split("$")[2] if stored.count("$") >= 3 else ""
    return hmac.compare_digest(apr1(password, salt), stored)


_APR_ALPHABET = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def apr1(password: str, salt: str) -> str:
    """Apache's MD5-based password hash (``$apr1$salt$hash``), as htpasswd -m writes it."""
    pw, s = password.encode(), salt[:8].encode()
    alt = hashlib.md5(pw + s + pw).digest()
    ctx = pw + b"$apr1$" + s + (alt * (len(pw) // 16 + 1))[: len(pw)]
    i = len(pw)
    while i:
        ctx += b"\0" if i & 1 else pw[:1]
        i >>= 1
    final = hashlib.md5(ctx).digest()
    for r in range(1000):
        step = pw if r & 1 else final
        if r % 3:
            step += s
        if r % 7:
            step += pw
        step += final if r & 1 else pw
        final = hashlib.md5(step).digest()
    out = ""
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        v = (final[a] << 16) | (final[b] << 8) | final[c]
        out += "".join(_APR_ALPHABET[(v >> (6 * k)) & 63] for k in range(4))
    v = final[11]
    out += "".join(_APR_ALPHABET[(v >> (6 * k)) & 63] for k in range(2))
    return f"$apr1${salt[:8]}${out}"
