"""JSON Web Tokens as Pulsar issues and checks them (``pulsar tokens ...``, PyJWT).

A token names its role in the ``sub`` claim (Pulsar's ``tokenAuthClaim``) and may carry an
``exp`` claim. It is signed either with a secret key (HS256; Pulsar's ``tokenSecretKey``, raw
bytes) or with the private half of a key pair (RS256 or ES256) and checked with the public
half (``tokenPublicKey``). Keys are named as Pulsar names them: ``file:///path``,
``data:;base64,...`` or a plain path; key files may be DER (what Pulsar writes) or PEM.
"""

from __future__ import annotations

import base64
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.core.errors import ConfigError, MagnetarError

KEY_PAIR_ALGORITHMS = ("RS256", "ES256")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class TokenError(MagnetarError):
    """A token is malformed, badly signed, expired, or names no role."""

    code = "auth.token"
    http_status = 401
    pulsar_error = "AuthenticationError"
    kafka_error = "SASL_AUTHENTICATION_FAILED"


@dataclass(frozen=True, slots=True)
class Claims:
    role: str
    expires_at: float | None  # epoch seconds; None: never


def read_key(setting: str, spec: str) -> bytes:
    """The bytes of a key named ``file:///path``, ``data:;base64,...`` or a path."""
    if spec.startswith("data:"):
        _, _, payload = spec.partition(",")
        try:
            return base64.b64decode(payload, validate=True)
        except ValueError:
            raise ConfigError(setting, "the data: URL does not hold base64") from None
    path = Path(spec.removeprefix("file://"))
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(setting, f"cannot read key file {str(path)!r}: {e.strerror}") from None


def client_token(spec: str) -> str | None:
    """The token a node's own clients present (``broker_client_auth_token``): a JWT,
    ``file:///path`` holding one, or Pulsar's ``token:JWT`` / ``file:///path`` parameter
    forms; None when unset."""
    spec = spec.strip()
    if not spec:
        return None
    spec = spec.removeprefix("token:")
    if spec.startswith(("file://", "/")):
        return read_key("broker_client_auth_token", spec).decode().strip()
    return spec


def secret_key() -> bytes:
    """A fresh HS256 secret key (256 bits), as ``pulsar tokens create-secret-key``."""
    return secrets.token_bytes(32)


def key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """A fresh (private, public) key pair, DER-encoded as Pulsar writes them."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ConfigError("signature_algorithm", f"use one of {', '.join(KEY_PAIR_ALGORITHMS)}")
    der = serialization.Encoding.DER
    return (
        private.private_bytes(der, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        private.public_key().public_bytes(der, serialization.PublicFormat.SubjectPublicKeyInfo),
    )


def parse_expiry(text: str) -> int:
    """Seconds of ``1h``, ``30m``, ``7d``, ``1y``, ``90`` (seconds): ``--expiry-time``."""
    found = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip())
    if found is None or int(found.group(1)) <= 0:
        raise ConfigError("expiry_time", f"{text!r} is not a duration such as 30m, 12h, 7d or 1y")
    return int(found.group(1)) * _UNITS.get(found.group(2) or "s", 1)


def create_token(
    subject: str, key: bytes, *, algorithm: str = "HS256", expires_in: int | None = None
) -> str:
    """A signed token for role ``subject``: ``key`` is the secret (HS256) or the private key
    (DER or PEM) of a key pair."""
    if not subject:
        raise ConfigError("subject", "a token needs a role")
    claims: dict[str, Any] = {"sub": subject}
    if expires_in is not None:
        claims["exp"] = int(time.time()) + expires_in
    signing: Any = key if algorithm == "HS256" else _private_key(key)
    return jwt.encode(claims, signing, algorithm=algorithm)


class TokenVerifier:
    """Checks tokens against a secret key (HS256) or a public key (RS256 / ES256)."""

    def __init__(self, *, secret: bytes | None = None, public: bytes | None = None) -> None:
        if (secret is None) == (public is None):
            raise ConfigError("token_secret_key", "set token_secret_key or token_public_key")
        self._key: Any = secret if secret is not None else _public_key(public or b"")
        self.algorithms = ["HS256"] if secret is not None else list(KEY_PAIR_ALGORITHMS)

    def verify(self, token: str, claim: str = "sub") -> Claims:
        """The role and expiry of a valid token; TokenError saying why otherwise."""
        try:
            body = jwt.decode(
                token, self._key, algorithms=self.algorithms, options={"require": [claim]}
            )
        except jwt.ExpiredSignatureError:
            raise TokenError("the token has expired: get a new one") from None
        except jwt.InvalidTokenError as e:
            raise TokenError(f"the token is not valid: {e}") from None
        role = body.get(claim)
        if not isinstance(role, str) or not role:
            raise TokenError(f"the token's {claim!r} claim names no role")
        exp = body.get("exp")
        return Claims(role, float(exp) if isinstance(exp, int | float) else None)


def _private_key(data: bytes) -> Any:
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except ValueError:
        raise ConfigError("private_key", "not a DER or PEM private key") from None


def _public_key(data: bytes) -> Any:
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except ValueError:
        raise ConfigError("token_public_key", "not a DER or PEM public key") from None
