"""Certificates a test makes for a private TLS server: its own CA, a server certificate for
127.0.0.1 and a client certificate, written as PEM files (nothing leaves the test)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Certificates", "make_certificates"]


@dataclass(frozen=True)
class Certificates:
    """PEM files: the CA, the server's pair (for 127.0.0.1) and a client pair."""

    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    hosts: tuple[str, ...] = (),
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, signer = issuer if issuer is not None else (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(h)) for h in hosts]),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_certificates(directory: Path, *, ca_name: str = "cdc test CA") -> Certificates:
    """A fresh CA and the server (127.0.0.1) and client certificates it signs."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _certificate(ca_name, ca_key, None)
    issuer = (ca.subject, ca_key)
    server_key, client_key = _key(), _key()
    server = _certificate("127.0.0.1", server_key, issuer, hosts=("127.0.0.1",))
    client = _certificate("cdc client", client_key, issuer)
    files = Certificates(
        ca_file=directory / "ca.pem",
        server_cert=directory / "server-cert.pem",
        server_key=directory / "server-key.pem",
        client_cert=directory / "client-cert.pem",
        client_key=directory / "client-key.pem",
    )
    _write_cert(ca, files.ca_file)
    _write_cert(server, files.server_cert)
    _write_key(server_key, files.server_key)
    _write_cert(client, files.client_cert)
    _write_key(client_key, files.client_key)
    return files
