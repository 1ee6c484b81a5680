"""The dev cluster's certificates: one CA, and a certificate per daemon and per kind of user,
each carrying its role (docs/operations.md §9.2, §9.5).

``hadev up`` (``hadev.devcluster``) and the process-test launchers (``hadev.namenodes``,
``hadev.journalnodes``) run every daemon with mutual TLS. ``make_pki`` writes, in a
directory, a CA (``ca.pem``; its key ``ca.key`` stays beside it) and one key pair per name,
each certificate valid for ``localhost``, ``127.0.0.1`` (and given addresses) and carrying its
roles as URIs ``hanamenode-role:<role>`` among its subject alternative names (``conf.guard``
reads them). ``cluster_identities`` names them for a cluster: ``client`` (what ``hafs`` and
any client present: the client role only), ``admin`` (``hactl``, ``hanamenode format``: the
admin role only), and one per NameNode and JournalNode::

    pki = make_pki(D / "conf" / "tls", cluster_identities(["jn1"], ["nn1", "nn2"]))
    pki.cert("nn1"), pki.key("nn1"), pki.ca
    pki.tls(CLIENT)                       # TLSSettings of the client certificate

An existing CA and existing certificates are kept (a later ``hadev up`` on the same directory
reuses them) as long as they carry the roles asked for; a name without a certificate, or one
whose certificate carries other roles (the dev cluster's ``admin`` held ``admin`` and
``client`` before issue 25), gets a new one from the same CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conf import TLSSettings
from conf.guard import ROLE_URI_PREFIX, Role, roles_of_certificate
from conf.xmlconf import ConfigValue

__all__ = [
    "ADMIN",
    "CLIENT",
    "HARNESS",
    "PLAINTEXT",
    "Pki",
    "cluster_identities",
    "make_pki",
    "transport_conf",
]

VALIDITY = datetime.timedelta(days=365)
CLIENT = "client"
"""The certificate of the file system's users (``hafs``, ``HaFsClient``): the client role."""
ADMIN = "admin"
"""The operator's certificate (``hactl``, ``hanamenode format``, ``bootstrap-standby``):
the admin role, and not the client role: an operator's tool is no file system client."""
HARNESS = "harness"
"""The generic certificate of a JournalNode-only test cluster, whose users are the test's own
QJM writers and readers, standing in for NameNodes, and its format: namenode and admin."""
TLS_PREFIX = "hanamenode.rpc.tls."
PLAINTEXT: dict[str, ConfigValue] = {TLS_PREFIX + "enabled": False}
"""The transport of a launcher asked for plaintext (``tls=False``): the daemons warn at start."""


def cluster_identities(
    journalnodes: Iterable[str], namenodes: Iterable[str]
) -> dict[str, set[Role]]:
    """The certificates of one cluster and their roles: ``client``, ``admin``, and one per
    JournalNode and NameNode id."""
    identities: dict[str, set[Role]] = {CLIENT: {Role.CLIENT}, ADMIN: {Role.ADMIN}}
    identities.update({jn: {Role.JOURNALNODE} for jn in journalnodes})
    identities.update({nn: {Role.NAMENODE} for nn in namenodes})
    return identities


@dataclass(frozen=True, slots=True)
class Pki:
    """Where the files are."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    def tls(self, name: str) -> TLSSettings:
        """Mutual TLS presenting certificate ``name``."""
        return TLSSettings(True, self.ca, self.cert(name), self.key(name))


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hanamenode dev cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key_path = pki.directory / "ca.key"
    if pki.ca.is_file() and key_path.is_file():
        cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("hanamenode dev CA"))
        .issuer_name(_name("hanamenode dev CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    pki.ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _issue(
    pki: Pki,
    name: str,
    roles: Iterable[Role],
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    addresses: Iterable[str],
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    alt_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        *(
            x509.IPAddress(ipaddress.ip_address(a))
            for a in sorted({"127.0.0.1", *addresses})
        ),
        *(x509.UniformResourceIdentifier(f"{ROLE_URI_PREFIX}{r}") for r in sorted(roles)),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(pki.key(name), _key_pem(key))
    pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_pki(
    directory: Path, roles: Mapping[str, Iterable[Role]], addresses: Iterable[str] = ()
) -> Pki:
    """A CA in ``directory`` (made if missing) and a certificate for each name of ``roles``
    that has none yet, carrying those roles, valid for localhost, 127.0.0.1 and the IP
    ``addresses`` (daemons in network namespaces)."""
    pki = Pki(Path(directory))
    pki.directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ca(pki)
    for name, name_roles in roles.items():
        if not _current(pki, name, name_roles):
            _issue(pki, name, name_roles, ca_cert, ca_key, list(addresses))
    return pki


def _current(pki: Pki, name: str, roles: Iterable[Role]) -> bool:
    """Whether ``name`` has a key pair whose certificate carries exactly ``roles``."""
    if not (pki.cert(name).is_file() and pki.key(name).is_file()):
        return False
    return roles_of_certificate(pki.cert(name).read_bytes()) == {str(r) for r in roles}


def transport_conf(pki: Pki, generic: str, daemons: Iterable[str]) -> dict[str, ConfigValue]:
    """The TLS keys of a configuration file: the CA, ``generic`` as the certificate of every
    tool that reads the file (``cert-file``, ``key-file``), and each of ``daemons`` its own
    (``cert-file.<id>``, ``key-file.<id>``, conf.settings ``for_daemon``)."""
    conf: dict[str, ConfigValue] = {
        TLS_PREFIX + "ca-file": pki.ca,
        TLS_PREFIX + "cert-file": pki.cert(generic),
        TLS_PREFIX + "key-file": pki.key(generic),
    }
    for name in daemons:
        conf[f"{TLS_PREFIX}cert-file.{name}"] = pki.cert(name)
        conf[f"{TLS_PREFIX}key-file.{name}"] = pki.key(name)
    return conf
