"""The admission webhook's TLS: a CA and a serving certificate, made with `cryptography`.

kopf can make a self-signed certificate itself, but through certbuilder/oscrypto,
which fail on OpenSSL 3; so the operator makes its own and hands kopf the files.
The files carry the names cert-manager writes into a TLS Secret (tls.crt, tls.key,
ca.crt), in the layout kubelet gives a mounted Secret (each name a symlink into
``..data``, itself a symlink to the current version): a directory the chart
mounts and a directory the operator fills itself look the same, and kopf's
webhook server, which re-reads the files when their content changes (rotation),
never sees a new key beside an old certificate.

The operator runs this module in a child process (``python -m
mountwarden.adapters.certs``, from mountwarden.adapters.certfiles.make), so that it
never loads `cryptography` itself: certfiles says why.

Keys are ECDSA P-256: generated in microseconds, accepted by the API server.

The CA's key is kept beside ca.crt (ca.key, mode 0600), so that a renewal re-issues
only the serving certificate, from the same CA: the caBundle registered with the
API server stays the one that verifies the new certificate, with no moment where
it trusts neither the old nor the new one (see ensure).
"""

import argparse
import datetime
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mountwarden.adapters.certfiles import CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE, ServingCertificate

#: A locally made certificate lasts a year; one that has less than RENEW_WITHIN left is made anew.
VALIDITY = datetime.timedelta(days=365)
RENEW_WITHIN = datetime.timedelta(days=30)
#: The CA lasts ten times as long as the certificates it signs: a renewal keeps it, so the caBundle written into
#: webhook configurations stays valid across renewals, and a new serving certificate is trusted the moment kopf
#: serves it, before anyone could register a new caBundle. The CA is replaced (and the caBundle with it) only once
#: it would end before a certificate it signs now: at most once a decade.
CA_VALIDITY = 10 * VALIDITY
CA_RENEW_WITHIN = VALIDITY + RENEW_WITHIN
# Backdated a little, so that a clock a few minutes behind does not reject a fresh certificate.
_CLOCK_SKEW = datetime.timedelta(hours=1)


def not_after(cert: Path) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc


def covers(cert: Path, hosts: Sequence[str]) -> bool:
    """``cert`` names every one of ``hosts`` (names or IPs) among its subject alternative names."""
    certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    present = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    present |= set(names.get_values_for_type(x509.DNSName))
    return all(_san_text(host) in present for host in hosts)


def _san_text(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _swap_link(link: Path, target: str) -> None:
    tmp = link.with_name(f"{link.name}_tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)  # atomic: readers see the old target or the new one


def _publish(directory: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """Write a new version of the files and switch to it in one rename, as kubelet does for a Secret volume."""
    directory.mkdir(parents=True, exist_ok=True)
    data_link = directory / "..data"
    previous = os.readlink(data_link) if data_link.is_symlink() else None
    version = Path(tempfile.mkdtemp(prefix="..", dir=directory))
    for name, (content, mode) in files.items():
        (version / name).write_bytes(content)
        os.chmod(version / name, mode)
    version.chmod(0o755)
    _swap_link(data_link, version.name)
    for name in files:
        link = directory / name
        if not (link.is_symlink() and os.readlink(link) == f"..data/{name}"):
            _swap_link(link, f"..data/{name}")
    # Keep the version just replaced: a reader may have resolved ..data a moment before the swap.
    for old in directory.glob("..*"):
        if old.is_dir() and not old.is_symlink() and old.name not in (version.name, previous):
            shutil.rmtree(old)


@dataclass(frozen=True)
class _Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _new_authority(now: datetime.datetime, validity: datetime.timedelta) -> _Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mountwarden-webhook-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Authority(key, cert)


def _kept_authority(directory: Path, now: datetime.datetime,
                    renew_within: datetime.timedelta) -> _Authority | None:
    """The CA in ``directory`` if its key is there, matches it, and it outlasts ``renew_within``; else None."""
    ca, ca_key = directory / CA_FILE, directory / CA_KEY_FILE
    if not (ca.exists() and ca_key.exists()):
        return None  # an older version kept no key, or someone else's CA (cert-manager's) is there
    try:
        cert = x509.load_pem_x509_certificate(ca.read_bytes())
        key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    except ValueError:
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return None
    if cert.not_valid_after_utc - now <= renew_within or cert.not_valid_before_utc > now:
        return None
    return _Authority(key, cert)


def _publish_signed(directory: Path, authority: _Authority, hosts: Sequence[str], now: datetime.datetime,
                    validity: datetime.timedelta) -> ServingCertificate:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_san(host) for host in hosts]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
                       critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    # The CA is published again with the certificate, byte for byte when kept: one version holds all four files.
    _publish(directory, {
        CA_FILE: (authority.cert.public_bytes(serialization.Encoding.PEM), 0o644),
        CA_KEY_FILE: (_pem_key(authority.key), 0o600),
        KEY_FILE: (_pem_key(key), 0o600),
        CERT_FILE: (cert.public_bytes(serialization.Encoding.PEM), 0o644),
    })
    return ServingCertificate(directory / CERT_FILE, directory / KEY_FILE, directory / CA_FILE)


def issue(directory: Path, hosts: Sequence[str], *, now: datetime.datetime | None = None,
          validity: datetime.timedelta = VALIDITY) -> ServingCertificate:
    """Make a new CA and a serving certificate for ``hosts`` (names or IPs) in ``directory``."""
    now = now or datetime.datetime.now(datetime.UTC)
    return _publish_signed(directory, _new_authority(now, CA_VALIDITY), hosts, now, validity)


def renew(directory: Path, hosts: Sequence[str], *, now: datetime.datetime | None = None,
          validity: datetime.timedelta = VALIDITY,
          ca_renew_within: datetime.timedelta = CA_RENEW_WITHIN) -> ServingCertificate:
    """A new serving certificate for ``hosts``, signed by the CA already in ``directory`` while that CA outlasts
    ``ca_renew_within`` (ca.crt unchanged, so the registered caBundle keeps verifying); else a new CA with it."""
    now = now or datetime.datetime.now(datetime.UTC)
    authority = _kept_authority(directory, now, ca_renew_within)
    if authority is None:
        return issue(directory, hosts, now=now, validity=validity)
    return _publish_signed(directory, authority, hosts, now, validity)


def ensure(directory: Path, hosts: Sequence[str], *, now: datetime.datetime | None = None,
           renew_within: datetime.timedelta = RENEW_WITHIN) -> ServingCertificate:
    """Reuse the certificate in ``directory`` if it covers ``hosts`` and is not about to expire; else renew it."""
    now = now or datetime.datetime.now(datetime.UTC)
    found = ServingCertificate.in_directory(directory)
    if found.cert.exists() and found.key.exists() and found.ca is not None:
        try:
            if covers(found.cert, hosts) and not_after(found.cert) - now > renew_within:
                return found
        except ValueError:
            pass  # not a certificate: replace it
    return renew(directory, hosts, now=now)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mountwarden.adapters.certs",
        description="Make the admission webhook's CA and serving certificate in DIRECTORY, for HOST (names or IPs): "
                    "what the operator runs in a child process with --webhook-mode local.")
    parser.add_argument("action", choices=("issue", "ensure"),
                        help="issue: a new CA and certificate; ensure: keep a certificate that covers the hosts and "
                             f"has more than {RENEW_WITHIN.days} days left, else renew it (from the same CA while it "
                             "lasts)")
    parser.add_argument("directory", type=Path, metavar="DIRECTORY")
    parser.add_argument("hosts", nargs="+", metavar="HOST")
    args = parser.parse_args(argv)
    (issue if args.action == "issue" else ensure)(args.directory, args.hosts)


if __name__ == "__main__":
    main()
