"""Certificates for TLS tests: a CA, server certificates for 127.0.0.1 / localhost, and client
certificates whose CN is a role, written as PEM files (the ``cryptography`` package, a test
dependency)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its key as PEM files."""

    cert: Path
    key: Path


class TestCA:
    """A certificate authority living in ``directory``; issues server and client certs."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "Magnetar Test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._name = subject
        self.certificate = (
            _builder(subject, subject, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / f"{_file(name)}.cert.pem"
        self.cert.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server(self, name: str = "server") -> CertFiles:
        """A server certificate for 127.0.0.1, ::1 and localhost."""
        alt = x509.SubjectAlternativeName(
            [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1")),
            ]
        )
        return self._issue(name, [alt], ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, role: str) -> CertFiles:
        """A client certificate whose CN is ``role``."""
        return self._issue(role, [], ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self, cn: str, extensions: list[x509.ExtensionType], usage: x509.ObjectIdentifier
    ) -> CertFiles:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        builder = _builder(subject, self._name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        files = CertFiles(
            self.directory / f"{_file(cn)}.cert.pem", self.directory / f"{_file(cn)}.key.pem"
        )
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return files


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def _file(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
