"""Certificates and kubeconfigs for the local control plane, made with `cryptography`.

Every identity is a client certificate signed by one throwaway CA: the admin (group
system:masters), kube-controller-manager and kube-scheduler (whose RBAC roles are
bootstrapped by the API server under exactly these user names) and kwok.
Keys are ECDSA P-256: generating one takes microseconds, where RSA-2048 takes tens of
milliseconds each, and every component accepts them (the service-account tokens are ES256).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The API server's address inside the cluster: the first IP of --service-cluster-ip-range.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
#: The one name the API server accepts on front-proxy client certificates.
FRONT_PROXY_CLIENT = "front-proxy-client"

# Backdate certificates a little so that a clock a few seconds behind does not reject them.
_CLOCK_SKEW = datetime.timedelta(hours=1)
_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class CertKey:
    """PEM paths of one certificate and its private key."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()


@dataclass(frozen=True)
class Pki:
    """Every file the control plane needs, under `<state-dir>/pki`."""

    ca: CertKey
    apiserver: CertKey
    admin: CertKey
    controller_manager: CertKey
    scheduler: CertKey
    kwok: CertKey
    front_proxy_ca: CertKey
    front_proxy_client: CertKey
    #: The API server's egress into the cluster network (mutual TLS with the proxy the real node runs for it):
    #: its client certificate, and the proxy's, valid for the loopback address the API server dials.
    egress_client: CertKey
    egress_proxy: CertKey
    #: Service-account token signing key pair (private for the API server and the
    #: token controller in kube-controller-manager, public for verification).
    service_account_key: Path
    service_account_pub: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Private keys readable by their owner only: they grant cluster-admin.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        # Kubernetes reads a client certificate's O= entries as the user's groups.
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + _VALIDITY)
    )


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """ECDSA keys sign (TLS handshakes; a CA's also certificates and CRLs) and encipher nothing."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _leaf_usage(builder: x509.CertificateBuilder, *usages) -> x509.CertificateBuilder:
    return (
        builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    )


def _make_ca(
    pki_dir: Path, stem: str, common_name: str
) -> tuple[ec.EllipticCurvePrivateKey, x509.Name, CertKey]:
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = CertKey(pki_dir / f"{stem}.crt", pki_dir / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return key, name, pair


def generate(pki_dir: Path) -> Pki:
    """Create a fresh CA and every certificate under `pki_dir` (overwriting old ones)."""
    pki_dir.mkdir(parents=True, exist_ok=True)

    ca_key, ca_name, ca = _make_ca(pki_dir, "ca", "mountwarden-dev-cluster-ca")
    # The front proxy (the API server calling aggregated API servers and passing the
    # user on in X-Remote-* headers) has its own CA, so that no ordinary client
    # certificate can claim to be it.
    front_proxy_key, front_proxy_name, front_proxy_ca = _make_ca(
        pki_dir, "front-proxy-ca", "mountwarden-dev-front-proxy-ca"
    )

    def issue(
        stem: str,
        subject: x509.Name,
        usages: list,
        sans: list | None = None,
        issuer: tuple[ec.EllipticCurvePrivateKey, x509.Name] = (ca_key, ca_name),
    ) -> CertKey:
        issuer_key, issuer_name = issuer
        key = _new_key()
        builder = _leaf_usage(_builder(subject, issuer_name, key.public_key()), *usages).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        pair = CertKey(pki_dir / f"{stem}.crt", pki_dir / f"{stem}.key")
        _write_cert(pair.cert, builder.sign(issuer_key, hashes.SHA256()))
        _write_key(pair.key, key)
        return pair

    client = [ExtendedKeyUsageOID.CLIENT_AUTH]
    # Every name a client may use for the API server: loopback from the host, and the
    # in-cluster Service names and IP for anything that follows the in-cluster config.
    apiserver_sans = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(KUBERNETES_SERVICE_IP)),
    ]
    sa_key = _new_key()
    service_account_key = pki_dir / "service-account.key"
    service_account_pub = pki_dir / "service-account.pub"
    _write_key(service_account_key, sa_key)
    service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca=ca,
        apiserver=issue(
            "kube-apiserver",
            _name("kube-apiserver"),
            [ExtendedKeyUsageOID.SERVER_AUTH],
            apiserver_sans,
        ),
        admin=issue("admin", _name("mountwarden-dev-admin", "system:masters"), client),
        # The API server's bootstrap RBAC binds its roles to exactly these user names.
        controller_manager=issue("kube-controller-manager", _name("system:kube-controller-manager"), client),
        scheduler=issue("kube-scheduler", _name("system:kube-scheduler"), client),
        # kwok writes node and pod status for simulated kubelets: give it admin rights
        # under its own name, so that the audit trail and managedFields say who wrote.
        kwok=issue("kwok", _name("kwok-controller", "system:masters"), client),
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=issue(
            "front-proxy-client",
            _name(FRONT_PROXY_CLIENT),
            client,
            issuer=(front_proxy_key, front_proxy_name),
        ),
        egress_client=issue("egress-client", _name("kube-apiserver-egress"), client),
        egress_proxy=issue("egress-proxy", _name("mountwarden-dev-egress-proxy"), [ExtendedKeyUsageOID.SERVER_AUTH],
                           [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        service_account_key=service_account_key,
        service_account_pub=service_account_pub,
    )


def issue_client(ca: CertKey, out_dir: Path, stem: str, common_name: str, organization: str | None) -> CertKey:
    """A client certificate signed by an existing CA (a node's kubelet joining later: system:node:<name>)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem())
    ca_key = serialization.load_pem_private_key(ca.key_pem(), password=None)
    key = _new_key()
    cert = (
        _leaf_usage(_builder(_name(common_name, organization), ca_cert.subject, key.public_key()),
                    ExtendedKeyUsageOID.CLIENT_AUTH)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    pair = CertKey(out_dir / f"{stem}.crt", out_dir / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(path: Path, *, server: str, ca: CertKey, user: str, client: CertKey) -> Path:
    """Write a self-contained kubeconfig (certificates embedded, so it can be copied anywhere)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "mountwarden-dev",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca.cert_pem())},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem()),
                    "client-key-data": _b64(client.key_pem()),
                },
            }
        ],
        "contexts": [{"name": "mountwarden-dev", "context": {"cluster": "mountwarden-dev", "user": user}}],
        "current-context": "mountwarden-dev",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(document, f, sort_keys=False)
    return path
