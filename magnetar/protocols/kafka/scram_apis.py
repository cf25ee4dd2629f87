"""Kafka's DescribeUserScramCredentials / AlterUserScramCredentials (KIP-554), v0.

The client salts the password itself and sends salt, iterations and the salted password;
what is kept is derived from them (:mod:`magnetar.broker.scram`). Only a super-user may
change or list credentials when authorization is on (any authenticated client when it is
off): CLUSTER_AUTHORIZATION_FAILED otherwise.
"""

from __future__ import annotations

from typing import Any

from magnetar.broker.scram import (
    KAFKA_MECHANISM,
    Credential,
    ScramCredentialError,
    ScramCredentials,
)
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
UNACCEPTABLE_CREDENTIAL = 93
_CODE = {name: code for code, name in KAFKA_MECHANISM.items()}
Response = dict[str, Any]


def _allowed(svc: Service, session: Session) -> bool:
    if svc.authorizer is None:
        return True
    return session.identity is not None and svc.authorizer.is_superuser(session.identity.role)


def _store(svc: Service) -> ScramCredentials:
    assert svc.scram is not None
    return svc.scram


async def describe_user_scram_credentials(svc: Service, session: Session, req: Request) -> Response:
    if not _allowed(svc, session) or svc.scram is None:
        why = "only a super-user lists SCRAM credentials"
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": why, "results": []}  # fmt: skip
    store = _store(svc)
    users = [u.name for u in req.body.users] if req.body.users is not None else await store.users()
    results: list[Response] = []
    for user in users:
        held = await store.get(user)
        if not held:
            results.append({"user": user, "error_code": RESOURCE_NOT_FOUND,
                            "error_message": f"no SCRAM credential for {user!r}",
                            "credential_infos": []})  # fmt: skip
            continue
        infos = [{"mechanism": _CODE[m], "iterations": c.iterations} for m, c in held.items()]
        results.append({"user": user, "error_code": 0, "error_message": None,
                        "credential_infos": infos})  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


async def alter_user_scram_credentials(svc: Service, session: Session, req: Request) -> Response:
    allowed = _allowed(svc, session) and svc.scram is not None
    results = []
    for d in req.body.deletions:
        results.append(await _delete(svc, d) if allowed else _denied(d.name))
    for u in req.body.upsertions:
        results.append(await _upsert(svc, u) if allowed else _denied(u.name))
    return {"throttle_time_ms": 0, "results": results}


def _denied(user: str) -> Response:
    return {"user": user, "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "only a super-user changes SCRAM credentials"}  # fmt: skip


async def _delete(svc: Service, d: Any) -> Response:
    mechanism = KAFKA_MECHANISM.get(d.mechanism)
    if mechanism is None:
        return {"user": d.name, "error_code": UNSUPPORTED_SASL_MECHANISM,
                "error_message": f"unknown SCRAM mechanism {d.mechanism}"}  # fmt: skip
    if not await _store(svc).delete(d.name, mechanism):
        return {"user": d.name, "error_code": RESOURCE_NOT_FOUND,
                "error_message": f"{d.name!r} has no {mechanism} credential"}  # fmt: skip
    return {"user": d.name, "error_code": 0, "error_message": None}


async def _upsert(svc: Service, u: Any) -> Response:
    mechanism = KAFKA_MECHANISM.get(u.mechanism)
    if mechanism is None:
        return {"user": u.name, "error_code": UNSUPPORTED_SASL_MECHANISM,
                "error_message": f"unknown SCRAM mechanism {u.mechanism}"}  # fmt: skip
    credential = Credential.from_salted_password(
        mechanism, bytes(u.salt), u.iterations, bytes(u.salted_password)
    )
    try:
        await _store(svc).put(u.name, mechanism, credential)
    except ScramCredentialError as e:
        return {"user": u.name, "error_code": UNACCEPTABLE_CREDENTIAL, "error_message": str(e)}
    return {"user": u.name, "error_code": 0, "error_message": None}
