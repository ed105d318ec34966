"""Certificates made for a test with openssl: a CA, and PEM files holding a private key (PKCS#8) with the
certificate the CA signed for it, for 127.0.0.1 (what a Kafka PEM keystore and the Python clients read)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA's certificate: every side's truststore
    broker: Path  # the broker's key and certificate
    client: Path  # the client's key and certificate


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(folder: Path, name: str) -> Path:
    """A key and a certificate the CA signed, for 127.0.0.1 and localhost, in one PEM file."""
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{name}.key", cwd=folder)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr", cwd=folder)
    (folder / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=folder)
    bundle = folder / f"{name}.pem"
    bundle.write_text((folder / f"{name}.key").read_text() + (folder / f"{name}.crt").read_text())
    return bundle


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-subj", "/CN=switchyard-test-ca",
             "-days", "2", "-out", "ca.pem", cwd=folder)
    return Certificates(folder / "ca.pem", _signed(folder, "broker"), _signed(folder, "client"))
