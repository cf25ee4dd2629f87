"""End-to-end encrypted messages with the official client: the payload is compressed, then
encrypted, by the producer, so the broker cannot (and must not try to) decompress it; it
stores and delivers it as sent, and only a consumer with the private key reads it."""

from __future__ import annotations

from pathlib import Path

import pulsar
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.broker.conftest import RECEIVE_MS


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
