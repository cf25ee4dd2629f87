"""SCRAM credentials (RFC 5802 / 7677) for Kafka's SCRAM-SHA-256 and SCRAM-SHA-512.

Stored salted, as Kafka stores them: for each user and mechanism the salt, the iteration
count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"); never the password nor the salted password. One node
per user, ``/admin/scram/<user>``, JSON ``{mechanism: {salt, iterations, stored_key,
server_key}}`` (base64), owned by :class:`ScramCredentials`.

:class:`ScramExchange` is the server side of one authentication: the client's first message
(user, nonce) is answered with the salt, iterations and a longer nonce; its final message
carries the proof, checked against StoredKey; the answer proves the server knows ServerKey.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from magnetar.core.authentication import AuthenticationError, Identity
from magnetar.core.errors import MagnetarError
from magnetar.meta import MetadataStore

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
KAFKA_MECHANISM = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism codes
MIN_ITERATIONS = 4096  # Kafka's minimum
MAX_ITERATIONS = 16384  # Kafka's maximum


class ScramCredentialError(MagnetarError):
    """A SCRAM credential cannot be stored as asked; the message says why."""

    code = "auth.scram"
    http_status = 401
    pulsar_error = "AuthenticationError"
    kafka_error = "SASL_AUTHENTICATION_FAILED"


@dataclass(frozen=True)
class Credential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, Any]:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return {"salt": b64(self.salt), "iterations": self.iterations,
                "stored_key": b64(self.stored_key), "server_key": b64(self.server_key)}  # fmt: skip

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Credential:
        d = base64.b64decode
        return cls(d(raw["salt"]), int(raw["iterations"]), d(raw["stored_key"]),
                   d(raw["server_key"]))  # fmt: skip

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, iterations: int, salted: bytes
    ) -> Credential:
        h = MECHANISMS[mechanism]
        client_key = hmac.digest(salted, b"Client Key", h)
        return cls(
            salt, iterations, hashlib.new(h, client_key).digest(),
            hmac.digest(salted, b"Server Key", h),
        )  # fmt: skip

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = 8192) -> Credential:
        salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, iterations, salted)


def check(mechanism: str, iterations: int) -> None:
    if mechanism not in MECHANISMS:
        raise ScramCredentialError(f"unknown mechanism {mechanism!r}: use {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramCredentialError(
            f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}"
        )


class ScramCredentials:
    """Users' SCRAM credentials in the metadata store; each write durable when it returns."""

    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta

    @staticmethod
    def _path(user: str) -> str:
        if not user or "/" in user or len(user) > 256:
            raise ScramCredentialError(f"{user[:64]!r} is not a user name")
        return f"/admin/scram/{user}"

    async def get(self, user: str) -> dict[str, Credential]:
        node = await self.meta.get(self._path(user))
        if node is None:
            return {}
        return {m: Credential.from_json(c) for m, c in json.loads(node.value).items()}

    async def users(self) -> list[str]:
        return sorted(await self.meta.list_children("/admin/scram"))

    async def put(self, user: str, mechanism: str, credential: Credential) -> None:
        check(mechanism, credential.iterations)
        current = await self.get(user)
        current[mechanism] = credential
        body = {m: c.to_json() for m, c in current.items()}
        await self.meta.put(self._path(user), json.dumps(body).encode())

    async def delete(self, user: str, mechanism: str) -> bool:
        """False when the user had no credential for ``mechanism``."""
        current = await self.get(user)
        if current.pop(mechanism, None) is None:
            return False
        path = self._path(user)
        if current:
            await self.meta.put(path, json.dumps({m: c.to_json() for m, c in current.items()}
                                                 ).encode())  # fmt: skip
        else:
            await self.meta.delete(path)
        return True


class ScramExchange:
    """The server side of one SCRAM authentication (two client messages)."""

    def __init__(self, store: ScramCredentials, mechanism: str) -> None:
        self.store = store
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism]
        self.user = ""
        self.first_bare = ""
        self.server_first = ""
        self.nonce = ""
        self.credential: Credential | None = None

    async def first(self, message: bytes) -> bytes:
        """The client-first message → the server-first message."""
        text = message.decode("utf-8", "replace")
        gs2, _, bare = text.partition(",")
        _authzid, _, bare = bare.partition(",")
        fields = _fields(bare)
        if gs2 not in ("n", "y") or "n" not in fields or "r" not in fields:
            raise AuthenticationError("malformed SCRAM client-first message")
        self.user = fields["n"].replace("=2C", ",").replace("=3D", "=")
        self.credential = (await self.store.get(self.user)).get(self.mechanism)
        if self.credential is None:
            raise AuthenticationError(f"unknown user {self.user!r} for {self.mechanism}")
        self.first_bare = bare
        self.nonce = fields["r"] + secrets.token_urlsafe(18)
        salt = base64.b64encode(self.credential.salt).decode()
        self.server_first = f"r={self.nonce},s={salt},i={self.credential.iterations}"
        return self.server_first.encode()

    def final(self, message: bytes) -> tuple[Identity, bytes]:
        """The client-final message (with its proof) → the identity and the server-final."""
        assert self.credential is not None
        text = message.decode("utf-8", "replace")
        without_proof, _, proof_field = text.rpartition(",p=")
        fields = _fields(without_proof)
        if fields.get("r") != self.nonce or not proof_field:
            raise AuthenticationError("SCRAM nonce mismatch")
        auth_message = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        signature = hmac.digest(self.credential.stored_key, auth_message, self.hash)
        try:
            proof = base64.b64decode(proof_field, validate=True)
        except ValueError:
            raise AuthenticationError("the SCRAM proof is not base64") from None
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if len(proof) != len(signature) or not hmac.compare_digest(
            hashlib.new(self.hash, client_key).digest(), self.credential.stored_key
        ):
            raise AuthenticationError(f"wrong password for {self.user!r}")
        server_signature = hmac.digest(self.credential.server_key, auth_message, self.hash)
        answer = "v=" + base64.b64encode(server_signature).decode()
        return Identity(self.user, self.mechanism.lower()), answer.encode()


def _fields(text: str) -> dict[str, str]:
    found = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            found[key] = value
    return found
