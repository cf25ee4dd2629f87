"""Pulsar's broker.conf keys as settings: --pulsar-conf files and camelCase TOML keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.core.config import build_settings
from magnetar.core.errors import ConfigError

CONF = """
# a slice of Pulsar's standalone-ssl.conf
brokerServicePort=6650
brokerServicePortTls=16651
webServicePortTls=18443
tlsCertificateFilePath=certs/broker-cert.pem
tlsKeyFilePath=certs/broker-key.pem
tlsTrustCertsFilePath=certs/cacert.pem
tlsRequireTrustedClientCertOnConnect=false
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls,\
org.apache.pulsar.broker.authentication.AuthenticationProviderToken
authorizationEnabled=true
superUserRoles=localhost,superUser,admin
tokenSecretKey=file:///tmp/secret.key
anonymousUserRole=anonymous
zookeeperServers=
managedLedgerDefaultEnsembleSize=1
"""


def test_a_pulsar_conf_file_becomes_settings(tmp_path: Path) -> None:
    path = tmp_path / "standalone.conf"
    path.write_text(CONF)
    s = build_settings(pulsar_conf=path, env={})
    assert s.tls_enabled and s.pulsar_tls_port == 16651 and s.https_port == 18443
    assert s.tls_certificate_file == "certs/broker-cert.pem"
    assert s.tls_trust_certs_file == "certs/cacert.pem"
    assert not s.tls_require_trusted_client_cert
    assert s.authentication_enabled and s.authorization_enabled
    assert "AuthenticationProviderToken" in s.authentication_providers
    assert s.superuser_roles == "localhost,superUser,admin"
    assert s.token_secret_key == "file:///tmp/secret.key"
    assert s.anonymous_user_role == "anonymous"


def test_flags_and_toml_override_the_pulsar_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=7000\nwebServicePort=7001\n")
    toml = tmp_path / "magnetar.toml"
    toml.write_text("webServicePort = 7002\nkafka_port = 7003\n")
    s = build_settings(pulsar_conf=conf, config_file=toml, env={}, overrides={"pulsar_port": 7004})
    assert (s.pulsar_port, s.http_port, s.kafka_port) == (7004, 7002, 7003)


def test_unknown_camel_case_keys_are_refused_in_toml(tmp_path: Path) -> None:
    toml = tmp_path / "magnetar.toml"
    toml.write_text("brokerServicePortt = 1\n")
    with pytest.raises(ConfigError, match="brokerServicePortt"):
        build_settings(config_file=toml, env={})


def test_a_malformed_line_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort 6650\n")
    with pytest.raises(ConfigError, match="line 1"):
        build_settings(pulsar_conf=conf, env={})
