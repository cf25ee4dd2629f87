"""The Kafka handler's settings: the namespace Kafka topics live in."""

from __future__ import annotations

import pytest

from magnetar.core.config import build_settings
from magnetar.core.errors import ConfigError


def test_kafka_namespace_defaults_to_public_default() -> None:
    assert build_settings(env={}).kafka_namespace == "public/default"
    env = {"MAGNETAR_KAFKA_NAMESPACE": "acme/events"}
    assert build_settings(env=env).kafka_namespace == "acme/events"


@pytest.mark.parametrize("bad", ["public", "a/b/c", "/default", "public/"])
def test_kafka_namespace_must_be_tenant_slash_namespace(bad: str) -> None:
    with pytest.raises(ConfigError, match="kafka_namespace"):
        build_settings(env={}, overrides={"kafka_namespace": bad})


def test_group_session_timeout_bounds_default_to_kafkas_and_must_be_ordered() -> None:
    settings = build_settings(env={})
    assert (settings.group_min_session_timeout_ms, settings.group_max_session_timeout_ms) == (
        6_000,
        1_800_000,
    )
    with pytest.raises(ConfigError, match="group_min_session_timeout_ms"):
        build_settings(env={}, overrides={"group_min_session_timeout_ms": 2_000_000})
