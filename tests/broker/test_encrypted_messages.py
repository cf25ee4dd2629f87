"""End-to-end encrypted messages with the official client: the payload is compressed, then
encrypted, by the producer, so the broker cannot (and must not try to) decompress it; it
stores and delivers it as sent, and only a consumer with the private key reads it."""

from __future__ import annotations

from pathlib import Path

import pulsar
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS
from tests.broker.test_compaction import compact
from tests.http.helpers import AdminHttp


def _keys(directory: Path) -> pulsar.CryptoKeyReader:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / "private.pem"
    public = directory / "public.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pulsar.CryptoKeyReader(str(public), str(private))


def test_compressed_encrypted_messages_are_stored_as_sent(
    client: pulsar.Client, topic: str, tmp_path: Path
) -> None:
    reader = _keys(tmp_path)
    producer = client.create_producer(
        topic,
        encryption_key="k",
        crypto_key_reader=reader,
        compression_type=pulsar.CompressionType.LZ4,
        batching_enabled=False,
    )
    consumer = client.subscribe(
        topic, "s", crypto_key_reader=reader, initial_position=pulsar.InitialPosition.Earliest
    )
    for i in range(3):
        producer.send(b"secret-%d" % i * 50)  # large enough to be compressed
    got = [consumer.receive(RECEIVE_MS) for _ in range(3)]
    assert [m.data() for m in got] == [b"secret-%d" % i * 50 for i in range(3)]
    context = got[0].encryption_context()
    assert context is not None and not context.is_decryption_failed()


def test_compaction_keeps_the_latest_of_encrypted_batches(
    client: pulsar.Client, standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    """The broker cannot read inside an encrypted batch: as Pulsar's compactor, it takes the
    batch's key for all its messages (key-based batching gives each batch one key)."""
    reader = _keys(tmp_path)
    producer = client.create_producer(
        topic,
        encryption_key="k",
        crypto_key_reader=reader,
        compression_type=pulsar.CompressionType.LZ4,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_publish_delay_ms=100,
    )
    for i in range(10):
        producer.send_async(b"v%d" % i, None, partition_key=f"k{i % 2}")
    producer.flush()
    compact(AdminHttp(standalone.http_url), topic)
    compacted = client.create_reader(
        topic, pulsar.MessageId.earliest, is_read_compacted=True, crypto_key_reader=reader
    )
    got = []
    while compacted.has_message_available():
        msg = compacted.read_next(RECEIVE_MS)
        got.append((msg.partition_key(), msg.data()))
    assert sorted(got) == [("k0", b"v8"), ("k1", b"v9")]
