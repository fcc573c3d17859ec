"""TLS for the multi-host harness's Redis (``--secured``): a throwaway CA and a server certificate for
the Redis host's address, written to the run's folder and valid for a few hours. Clients check the
certificate and its address (redis-py checks the host name), so the certificate names the IP.

Needs the ``cryptography`` package (a development dependency), imported only for a secured run.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerTls:
    """The CA's certificate (what clients trust) and the server's certificate and key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def issue_server_tls(folder: Path, address: str) -> ServerTls:
    """A CA, and a certificate it signs for ``address`` (an IP), in ``folder``; keys readable by the
    owner only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(hours=6)

    def key_file(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.touch(mode=0o600)
        path.write_bytes(pem)
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parley-multihost-ca")])
    ca = (
        x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name)
        .not_valid_before(start)
        .not_valid_after(end)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder(
            subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]),
            issuer_name=ca_name,
        )
        .not_valid_before(start)
        .not_valid_after(end)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    out = ServerTls(folder / "ca.pem", folder / "redis.pem", folder / "redis.key")
    out.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file(key, out.key_file)
    return out
