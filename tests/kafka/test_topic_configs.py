"""Topic configs given at creation are never accepted and dropped (issue 23, item 1): per-topic
configs are not stored yet, so CreateTopics refuses any config whose value the topic would
not have, with INVALID_CONFIG naming it, and accepts one that matches what DescribeConfigs
then reports."""

from __future__ import annotations

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from tests.kafka.conftest import TIMEOUT_S


@pytest.mark.parametrize(
    "config",
    [{"cleanup.policy": "compact"}, {"max.message.bytes": "10000000"}, {"no.such.config": "1"}],
)
def test_confluent_create_with_an_unappliable_config_is_refused(
    bootstrap: str, topic: str, config: dict[str, str]
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(TIMEOUT_S)
    error = refused.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert next(iter(config)) in error.str()
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics  # nothing created


def test_a_config_the_topic_has_anyway_is_accepted_and_reported(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "delete", "message.timestamp.type": "CreateTime"}
    admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert {k: described[k].value for k in config} == config


def test_kafka_python_create_with_compact_is_refused(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        new = KpNewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})
        with pytest.raises(kafka.errors.InvalidConfigurationError, match=r"cleanup\.policy"):
            admin.create_topics([new])
    finally:
        admin.close()
