"""An ACK carrying ``validation_error`` acknowledges the message, as in Pulsar (which logs it).

The official client sends one when it discards a message it cannot use, e.g. a consumer
without the decryption key and ``ConsumerCryptoFailureAction.DISCARD`` (apache/pulsar-client-
python's ``test_encryption_failure``). The discarded messages must leave the backlog for good:
neither the running server nor a restarted one may deliver them again.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import assert_nothing_more, payloads

TOPIC = "persistent://public/default/encrypted-discard"
DEADLINE_S = 15.0  # how long the backlog may take to drain before the test fails


def _key_pair(directory: Path) -> pulsar.CryptoKeyReader:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public, private = directory / "public.pem", directory / "private.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pulsar.CryptoKeyReader(str(public), str(private))


def _backlog(server: StandaloneProcess, subscription: str) -> int:
    url = f"{server.http_url}/admin/v2/persistent/public/default/encrypted-discard/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.load(response)
    return int(stats["subscriptions"][subscription]["msgBacklog"])


def _wait_for_empty_backlog(server: StandaloneProcess, subscription: str) -> None:
    """Poll the admin API until the backlog is 0; fail with the last value past the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while (backlog := _backlog(server, subscription)) != 0:
        if time.monotonic() > deadline:
            pytest.fail(f"backlog still {backlog}: the discarded messages were not acknowledged")
        time.sleep(0.1)  # polling interval, not synchronisation


def _client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _discard_without_key(
    server: StandaloneProcess, client: pulsar.Client, keys: pulsar.CryptoKeyReader
) -> None:
    consumer = client.subscribe(
        TOPIC, "no-key", crypto_failure_action=pulsar.ConsumerCryptoFailureAction.DISCARD
    )
    producer = client.create_producer(TOPIC, encryption_key="magnetar-test", crypto_key_reader=keys)
    for data in payloads(5):
        producer.send(data)
    _wait_for_empty_backlog(server, "no-key")
    assert_nothing_more(consumer)
    consumer.close()


@pytest.mark.slow
def test_discarded_undecryptable_messages_leave_the_backlog(tmp_path: Path) -> None:
    keys = _key_pair(tmp_path)
    with StandaloneProcess(tmp_path / "data") as server:
        client = _client(server)
        try:
            _discard_without_key(server, client, keys)
        finally:
            client.close()

    with StandaloneProcess(tmp_path / "data") as restarted:
        client = _client(restarted)
        try:
            # With the key this time: a message delivered again would now be received.
            consumer = client.subscribe(TOPIC, "no-key", crypto_key_reader=keys)
            assert _backlog(restarted, "no-key") == 0
            assert_nothing_more(consumer)
        finally:
            client.close()
