"""Until Kafka transactions are built (issue 17), a transactional producer fails at once with
a clear, non-retriable error from every client, instead of retrying COORDINATOR_NOT_AVAILABLE
until its timeout: FindCoordinator for a transactional id (and InitProducerId with one)
answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED with a message saying what to do."""

from __future__ import annotations

import aiokafka
import aiokafka.errors
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import InitProducerIdRequest

from tests.kafka.conftest import TIMEOUT_S, RawKafka

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def test_confluent_init_transactions_fails_fatally(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-confluent"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT_S)
    error = refused.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal()
    assert "not supported by this server" in error.str()


def test_kafka_python_init_transactions_fails(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-kafka-python")
    try:
        with pytest.raises(kafka.errors.TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(timeout=1)


async def test_aiokafka_transactional_start_fails(bootstrap: str) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-aio")
    try:
        with pytest.raises(aiokafka.errors.TransactionalIdAuthorizationFailed):
            await producer.start()
    finally:
        await producer.stop()


def test_the_wire_answers(raw: RawKafka) -> None:
    found = raw.request(FindCoordinatorRequest[1](key="txn-raw", key_type=1))
    assert found.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "idempotent producer" in found.error_message
    init = raw.request(InitProducerIdRequest[1](transactional_id="txn-raw",
                                                transaction_timeout_ms=60_000))  # fmt: skip
    assert init.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    group = raw.request(FindCoordinatorRequest[1](key="a-group", key_type=0))
    assert group.error_code == 0  # groups are coordinated as before
