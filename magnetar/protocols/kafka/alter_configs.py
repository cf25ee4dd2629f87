"""AlterConfigs and IncrementalAlterConfigs: Kafka topic configs written as Pulsar topic
policies, the same ones CreateTopics writes and Pulsar's topic REST reads.

``retention.ms`` / ``retention.bytes`` are the topic's retention policy (whole minutes / MiB,
Pulsar's units; -1 unlimited), ``max.message.bytes`` its maxMessageSize and
``cleanup.policy`` (``compact`` or ``delete``, a list: APPEND / SUBTRACT work) its compaction
threshold; the fixed configs (``compression.type=producer`` ...) take only their one value,
anything else is refused with INVALID_CONFIG naming it (see ``admin.topic_policies``).
AlterConfigs replaces the topic's whole Kafka config, as Kafka does: a config left out goes
back to its default (the namespace's policy or the broker's setting).
IncrementalAlterConfigs changes only the configs it names: SET, DELETE (back to the
default), APPEND / SUBTRACT for list configs.
Durable, and followed by the topic's partitions, when answered; ``validate_only`` checks
without storing. Broker configs are static (flags and settings file): INVALID_CONFIG.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, NoReturn

from magnetar.broker.policies import TopicPolicies
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import admin
from magnetar.protocols.kafka.admin import BROKER_RESOURCE, TOPIC_RESOURCE, ConfigError
from magnetar.protocols.kafka.errors import ErrorCode, UnknownTopicError, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

Response = dict[str, Any]
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
_UNLIMITED = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
_RETENTION_KEYS = {"retention.ms": "retentionTimeInMinutes", "retention.bytes": "retentionSizeInMB"}


async def alter_configs(svc: Service, session: Session, req: Request) -> Response:
    return await _alter(svc, req, incremental=False)


async def incremental_alter_configs(svc: Service, session: Session, req: Request) -> Response:
    return await _alter(svc, req, incremental=True)


async def _alter(svc: Service, req: Request, *, incremental: bool) -> Response:
    responses = []
    for r in req.body.resources:
        error, message = ErrorCode.NONE, None
        try:
            await _alter_resource(svc, r, incremental, bool(req.body.validate_only))
        except ConfigError as e:
            error, message = ErrorCode.INVALID_CONFIG, str(e)
        except _InvalidRequest as e:
            error, message = ErrorCode.INVALID_REQUEST, str(e)
        except MagnetarError as e:
            error, message = error_code_of(e), str(e)
        responses.append(
            {
                "error_code": error,
                "error_message": message,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
        )
    return {"throttle_time_ms": 0, "responses": responses}


class _InvalidRequest(ValueError):
    """A resource type configs cannot be altered for (INVALID_REQUEST)."""


async def _alter_resource(svc: Service, r: Any, incremental: bool, validate_only: bool) -> None:
    if r.resource_type == BROKER_RESOURCE:
        raise ConfigError(
            "broker configs are static here: set them with magnetar's flags or settings file "
            "and restart (topic configs can change)"
        )
    if r.resource_type != TOPIC_RESOURCE:
        raise _InvalidRequest(f"configs of resource type {r.resource_type} cannot be altered")
    topic = r.resource_name
    if await svc.topics.partition_count(topic) is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    name = svc.topics.name(topic)
    store = svc.broker.topic_policies
    current = await store.get(name.tenant, name.namespace, name.local)
    if incremental:
        wanted = _incremental(svc, current, r.configs or [])
    else:
        given = admin.topic_policies(svc, r.configs or [])
        wanted = replace(
            current,
            retentionPolicies=given.retentionPolicies,
            maxMessageSize=given.maxMessageSize,
            compactionThreshold=given.compactionThreshold,
        )
    if validate_only or wanted == current:
        return
    await store.set(name.tenant, name.namespace, name.local, wanted)
    await svc.broker.apply_topic_policies(name)


def _incremental(svc: Service, policies: TopicPolicies, configs: list[Any]) -> TopicPolicies:
    """``policies`` with each config operation applied in turn (ConfigError on any bad one:
    nothing is applied then)."""
    for c in configs:
        name, op, value = c.name, c.config_operation, c.value
        if op in (APPEND, SUBTRACT) and name == "cleanup.policy":
            policies = _list_op(svc, policies, op, value)
        elif op in (APPEND, SUBTRACT):
            _refuse_list_op(name, op, value)
        elif op == DELETE:
            policies = _without(policies, name)
        elif op == SET:
            policies = _with(svc, policies, name, value)
        else:
            raise ConfigError(f"unknown config operation {op} for {name!r}")
    return policies


def _with(svc: Service, policies: TopicPolicies, name: str, value: str | None) -> TopicPolicies:
    """``policies`` with config ``name`` set to ``value`` (validated as at creation)."""
    given = admin.topic_policies(svc, [SimpleNamespace(name=name, value=value)])
    if name in _RETENTION_KEYS:
        assert given.retentionPolicies is not None
        key = _RETENTION_KEYS[name]
        retention = dict(policies.retentionPolicies or _UNLIMITED)
        retention[key] = given.retentionPolicies[key]
        return replace(policies, retentionPolicies=retention)
    if name == "max.message.bytes":
        return replace(policies, maxMessageSize=given.maxMessageSize)
    if name == "cleanup.policy":
        return replace(policies, compactionThreshold=given.compactionThreshold)
    return policies  # a fixed config given its one value


def _without(policies: TopicPolicies, name: str) -> TopicPolicies:
    """``policies`` with config ``name`` back to its default. The two retention configs are
    one Pulsar policy: with both unlimited it is removed, so the namespace's applies again."""
    if name in _RETENTION_KEYS:
        retention = dict(policies.retentionPolicies or _UNLIMITED)
        retention[_RETENTION_KEYS[name]] = -1
        return replace(policies, retentionPolicies=None if retention == _UNLIMITED else retention)
    if name == "max.message.bytes":
        return replace(policies, maxMessageSize=None)
    if name == "cleanup.policy":
        return replace(policies, compactionThreshold=None)
    if name in admin.FIXED_CONFIGS:
        return policies  # already its default, its only value
    raise ConfigError(f"topic config {name!r} is not supported")


def _list_op(svc: Service, policies: TopicPolicies, op: int, value: str | None) -> TopicPolicies:
    """APPEND / SUBTRACT on cleanup.policy: the topic's own list (compact when it has a
    compaction threshold, else delete) with ``value``'s policies added or taken away; taking
    compact away leaves delete (retention applies to a compacted topic as well)."""
    current = ["compact"] if (policies.compactionThreshold or 0) > 0 else ["delete"]
    given = admin.cleanup_policies(value)
    if op == APPEND:
        wanted = current + [p for p in given if p not in current]
    else:
        wanted = [p for p in current if p not in given]
    if not wanted:  # a compacted topic's retention applies too (compact,delete): delete
        wanted = ["delete"]
    return _with(svc, policies, "cleanup.policy", ",".join(wanted))


def _refuse_list_op(name: str, op: int, value: str | None) -> NoReturn:
    what = "APPEND" if op == APPEND else "SUBTRACT"
    raise ConfigError(f"{what} is only for list configs; {name!r} is not one (use SET)")
