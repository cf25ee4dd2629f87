"""Advertised listeners: a LOOKUP naming a listener (``pulsar.Client(listener_name=...)``) is
answered with that listener's URL; an unknown name fails at once with an error naming the
listeners the broker has (not a lookup retried until the operation timeout)."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from magnetar.core.config import build_settings, parse_listeners
from magnetar.core.errors import ConfigError
from magnetar.testing.server import StandaloneProcess, free_port
from tests.broker.conftest import RECEIVE_MS

TOPIC = "persistent://public/default/listeners"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """ "internal" names an address nobody listens on: only a lookup answered with the
    "external" listener lets a client reach the broker through it."""
    process = StandaloneProcess(tmp_path_factory.mktemp("listeners"))
    dead = free_port()
    process.extra_args = [
        "--advertised-listeners",
        f"internal:pulsar://127.0.0.1:{dead},external:pulsar://127.0.0.1:{process.pulsar_port}",
    ]
    with process:
        yield process


def _client(server: StandaloneProcess, **options: object) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        **options,
    )


def test_named_listener_is_served(server: StandaloneProcess) -> None:
    client = _client(server, listener_name="external")
    try:
        consumer = client.subscribe(TOPIC, "sub")
        producer = client.create_producer(TOPIC)
        producer.send(b"through the external listener")
        assert consumer.receive(RECEIVE_MS).data() == b"through the external listener"
    finally:
        client.close()


def test_no_listener_name_gets_the_default_url(server: StandaloneProcess) -> None:
    client = _client(server)
    try:
        client.create_producer(TOPIC).send(b"default")
    finally:
        client.close()


def test_unknown_listener_fails_with_an_error(server: StandaloneProcess) -> None:
    client = _client(server, listener_name="nonexistent")
    try:
        with pytest.raises(pulsar.PulsarException) as refused:
            client.create_producer(TOPIC)
        assert not isinstance(refused.value, pulsar.Timeout)
        assert isinstance(refused.value, pulsar.NotAllowedError)
    finally:
        client.close()


def test_listener_setting_is_parsed() -> None:
    text = "internal:pulsar://10.0.0.1:6650,external:pulsar://a.example:6651,"
    text += "external:pulsar+ssl://a.example:6652"
    assert parse_listeners(text) == {
        "internal": {"pulsar": "pulsar://10.0.0.1:6650"},
        "external": {
            "pulsar": "pulsar://a.example:6651",
            "pulsar+ssl": "pulsar+ssl://a.example:6652",
        },
    }


@pytest.mark.parametrize(
    "text",
    ["external", "external:http://h:1", "external:pulsar://h", "x:pulsar://h:1,x:pulsar://h:2"],
)
def test_malformed_listener_setting_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="advertised_listeners"):
        build_settings(env={"MAGNETAR_ADVERTISED_LISTENERS": text})
