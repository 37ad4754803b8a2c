"""The local cluster's certificates: one CA, one key and certificate per Kafka node (PEM).

    first `dev up --cluster` --ensure_tls(dir, nodes)--> ca.pem, ca-key.pem,
        node-N.pem (node key, PKCS#8, then its certificate, then the CA: Kafka's PEM keystore)
        --> each node's ssl.keystore.location / ssl.truststore.location
        --> clients trust ca.pem (VF_KAFKA_SSL_CAFILE)

Node certificates name `CN=vf-node-N` (the principal a node has on the mutual-TLS
controller listener, listed in super.users) and carry 127.0.0.1 and localhost as subject
alternative names, so clients verify the host name they dialled. Every file is written
0600 in a 0700 folder; existing files are kept, so certificates survive restarts.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825  # the longest validity browsers and most TLS stacks accept for a leaf


def node_principal(node_id: int) -> str:
    return f"CN=vf-node-{node_id}"


def write_private(path: Path, data: bytes) -> None:
    """Create or replace `path` with mode 0600 from the first byte (no window where it is
    readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


def ensure_tls(folder: Path, node_ids: list[int]) -> Path:
    """The CA (made once) and a keystore per node; returns the CA certificate's path."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    ca_cert_path, ca_key_path = folder / "ca.pem", folder / "ca-key.pem"
    if not (ca_cert_path.exists() and ca_key_path.exists()):
        key, cert = _make_ca()
        write_private(ca_key_path, _key_pem(key))
        write_private(ca_cert_path, cert.public_bytes(serialization.Encoding.PEM))
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
    for node_id in node_ids:
        keystore = folder / f"node-{node_id}.pem"
        if keystore.exists():
            continue
        key, cert = _make_node(node_id, ca_key, ca_cert)
        write_private(keystore, _key_pem(key) + cert.public_bytes(serialization.Encoding.PEM)
                      + ca_cert.public_bytes(serialization.Encoding.PEM))
    return ca_cert_path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # Unencrypted PKCS#8: Kafka's PEM keystore reads it without ssl.key.password; the file's
    # 0600 mode is what protects it on this machine.
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)  # clock skew


def _make_ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "VoiceFactory local cluster CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now()).not_valid_after(_now() + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _make_node(node_id: int, ca_key: ec.EllipticCurvePrivateKey,
               ca_cert: x509.Certificate) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"vf-node-{node_id}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now()).not_valid_after(_now() + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        # Server on every listener, client towards the other nodes' controller listener.
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert
