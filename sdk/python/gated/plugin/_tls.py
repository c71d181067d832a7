"""The plugin's side of go-plugin's automatic mutual TLS."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import secrets
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The name both sides verify: go-plugin's certificates are for localhost.
SERVER_NAME = "localhost"


@dataclass(frozen=True)
class Identity:
    """The plugin's key and certificate for one run."""

    key_pem: bytes
    cert_pem: bytes
    cert_der: bytes

    def handshake_field(self) -> str:
        """The certificate as the handshake line's sixth field: the DER
        bytes in standard base64 without padding (the line has no room
        for PEM's newlines)."""
        return base64.b64encode(self.cert_der).decode("ascii").rstrip("=")


def new_identity() -> Identity:
    """Make a fresh key pair and a self-signed certificate for localhost,
    valid for serving (to gated) and for dialing gated's brokered services.
    The key never leaves the process."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(int.from_bytes(secrets.token_bytes(16), "big") >> 1)
        .not_valid_before(now - datetime.timedelta(seconds=30))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(SERVER_NAME), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return Identity(
        key_pem=key_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        cert_der=cert.public_bytes(serialization.Encoding.DER),
    )
