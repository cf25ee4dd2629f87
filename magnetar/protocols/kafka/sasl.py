"""Kafka SASL authentication: SaslHandshake v1 and SaslAuthenticate v0-2 (KIP-152).

With authentication on, a connection must authenticate before any request other than
ApiVersions, SaslHandshake and SaslAuthenticate (the server closes it otherwise, as Kafka
does). Mechanisms, over the node's providers (:mod:`magnetar.core.authentication`):

- ``PLAIN`` (RFC 4616): the password is a token (``token:<jwt>`` as Kafka-on-Pulsar takes
  it, or a bare JWT), else the user and password are checked by the basic provider;
- ``OAUTHBEARER`` (RFC 7628): the bearer token is a JWT checked by the token provider;
- ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802): against the salted credentials kept in
  the metadata store (:mod:`magnetar.broker.scram`), in two SaslAuthenticate rounds.

A refused credential is answered SASL_AUTHENTICATION_FAILED with the reason, then the
connection closes. A client certificate on the SSL listener authenticates the connection
when the ``tls`` provider is on (role = CN), with no SASL exchange.
"""

from __future__ import annotations

import time
from typing import Any

from magnetar.broker.scram import MECHANISMS, ScramExchange
from magnetar.core.authentication import AuthenticationError, Authenticator, Identity
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
Response = dict[str, Any]


def mechanisms(auth: Authenticator | None, scram: bool = False) -> list[str]:
    """The SASL mechanisms the node's providers (and its SCRAM store) make possible."""
    if auth is None:
        return []
    found = []
    if "token" in auth.providers or "basic" in auth.providers:
        found.append("PLAIN")
    if "token" in auth.providers:
        found.append("OAUTHBEARER")
    if scram:
        found += list(MECHANISMS)
    return found


async def sasl_handshake(svc: Service, session: Session, req: Request) -> Response:
    offered = mechanisms(svc.authenticator, svc.scram is not None)
    mechanism = str(req.body.mechanism)
    if mechanism not in offered:
        return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
    session.sasl_mechanism = mechanism
    return {"error_code": 0, "mechanisms": offered}


async def sasl_authenticate(svc: Service, session: Session, req: Request) -> Response:
    """Check the client's one SASL message; on failure the connection closes after the
    answer (``session.close_after_answer``)."""
    auth = svc.authenticator
    if auth is None or session.sasl_mechanism is None:
        session.close_after_answer = True
        return _failed(ILLEGAL_SASL_STATE, "SaslHandshake must come first")
    data = bytes(req.body.auth_bytes or b"")
    if session.sasl_mechanism in MECHANISMS:
        return await _scram(svc, session, data)
    try:
        if session.sasl_mechanism == "PLAIN":
            identity = _plain(auth, data)
        else:
            identity = _oauthbearer(auth, data)
    except AuthenticationError as e:
        session.close_after_answer = True
        return _failed(SASL_AUTHENTICATION_FAILED, f"authentication failed: {e}")
    return _authenticated(session, identity, b"")


async def _scram(svc: Service, session: Session, data: bytes) -> Response:
    """SCRAM takes two SaslAuthenticate rounds: client-first, then client-final."""
    assert svc.scram is not None and session.sasl_mechanism is not None
    try:
        if session.scram is None:
            session.scram = ScramExchange(svc.scram, session.sasl_mechanism)
            answer = await session.scram.first(data)
        else:
            identity, answer = session.scram.final(data)
            session.scram = None
            return _authenticated(session, identity, answer)
    except AuthenticationError as e:
        session.close_after_answer = True
        return _failed(SASL_AUTHENTICATION_FAILED, f"authentication failed: {e}")
    return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": 0}


def _authenticated(session: Session, identity: Identity, answer: bytes) -> Response:
    """Success. A credential that expires (a token's exp) bounds the session (KIP-368): the
    client is told how long it has, re-authenticates on the same connection before then
    (SaslHandshake + SaslAuthenticate again, same role), or is closed at its next request."""
    if session.identity is not None and identity.role != session.identity.role:
        session.close_after_answer = True
        return _failed(SASL_AUTHENTICATION_FAILED, "re-authentication may not change the role")
    session.identity = identity
    lifetime = 0
    if identity.expires_at is not None:
        lifetime = max(1, int((identity.expires_at - time.time()) * 1000))
    return {"error_code": 0, "error_message": None, "auth_bytes": answer,
            "session_lifetime_ms": lifetime}  # fmt: skip


def _failed(code: int, message: str) -> Response:
    return {"error_code": code, "error_message": message, "auth_bytes": b""}


def _plain(auth: Authenticator, data: bytes) -> Identity:
    parts = data.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationError("a PLAIN message is [authzid] NUL user NUL password")
    _, user, password = parts
    if password.startswith(b"token:"):
        return auth.authenticate("token", password[len(b"token:") :])
    if "token" in auth.providers and password.count(b".") == 2:  # a bare JWT
        try:
            return auth.authenticate("token", password)
        except AuthenticationError:
            if "basic" not in auth.providers:
                raise
    if "basic" in auth.providers:
        return auth.authenticate("basic", user + b":" + password)
    return auth.authenticate("token", password)


def _oauthbearer(auth: Authenticator, data: bytes) -> Identity:
    # RFC 7628 client first message: gs2 header, then \x01-separated key=value pairs
    for field in data.split(b"\x01"):
        key, _, value = field.partition(b"=")
        if key == b"auth" and value[:7].lower() == b"bearer ":
            return auth.authenticate("token", value[7:].strip())
    raise AuthenticationError("the OAUTHBEARER message carries no auth=Bearer <token>")
