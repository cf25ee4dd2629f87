"""Storage nodes whose node port speaks TLS and requires a trusted client certificate
(mTLS): a broker offering its certificate publishes and reads through them; a plain
connection, or a TLS one without a certificate, gets no answer."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import pulsar
import pytest

from magnetar.cluster.wire import Op, frame, read_frame
from magnetar.testing.certs import TestCA
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.slow
TOPIC = "persistent://public/default/over-tls"


async def _ping(port: int, context: ssl.SSLContext | None) -> bytes | str:
    """A PING's answer from the node, or why there was none."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context), 10
        )
        writer.write(frame(Op.PING, 1, b""))
        _, _, body = await asyncio.wait_for(read_frame(reader), 10)
        return body
    except (OSError, asyncio.IncompleteReadError) as e:  # ssl.SSLError is an OSError
        return f"refused: {type(e).__name__}"
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def test_brokers_use_storage_nodes_over_mutual_tls(cluster: Cluster, tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "certs")
    server, broker_cert = ca.server("node"), ca.client("broker")
    node_tls = ["--tls-enabled", "true", "--tls-certificate-file", str(server.cert),
                "--tls-key-file", str(server.key), "--tls-trust-certs-file", str(ca.cert),
                "--tls-require-trusted-client-cert", "true"]  # fmt: skip
    for _ in range(2):
        cluster.add_node(*node_tls)
    assert all("node port TLS, only clients with a trusted" in "".join(n.output)
               for n in cluster.nodes)  # fmt: skip
    b = cluster.add_broker(
        "--broker-client-trust-certs-file", str(ca.cert),
        "--broker-client-certificate-file", str(broker_cert.cert),
        "--broker-client-key-file", str(broker_cert.key),
    )  # fmt: skip
    client = pulsar.Client(b.pulsar_url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sent = [f"m-{i}".encode() for i in range(50)]
        for value in sent:
            producer.send(value)
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        assert [reader.read_next(10_000).data() for _ in sent] == sent
    finally:
        client.close()
    ensemble = cluster.ledgers(TOPIC)[0]["ensembles"][0][1]
    assert sorted(ensemble) == sorted(n.node_id for n in cluster.nodes)
    for node in cluster.nodes:  # no clear-text Arrow Flight endpoint: Spark reads via brokers
        registered = cluster.meta(f"/storage-nodes/{node.node_id}")
        assert registered["tls"] is True and registered["flight"] == 0

    port = cluster.nodes[0].storage_port
    trusted = ssl.create_default_context(cafile=ca.cert)
    trusted.check_hostname = False
    assert str(asyncio.run(_ping(port, None))).startswith("refused")  # plain text
    assert str(asyncio.run(_ping(port, trusted))).startswith("refused")  # no certificate
    trusted.load_cert_chain(broker_cert.cert, broker_cert.key)
    assert asyncio.run(_ping(port, trusted))[:1] == b"\x00"  # Status.OK with the broker's
