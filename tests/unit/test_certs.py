"""The webhook's CA and serving certificate, and the server picking up a rotated one over real TLS."""

import asyncio
import base64
import datetime
import json
import os
import ssl
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from mountwarden.adapters import certfiles, certs
from mountwarden.adapters.webhookconfig import local_server

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_issue_makes_a_ca_and_a_certificate_it_signed_for_the_hosts(tmp_path):
    made = certs.issue(tmp_path, ["127.0.0.1", "mountwarden.example"], now=NOW)
    cert, ca = load(made.cert), load(made.ca)
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["mountwarden.example"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc == NOW + certs.VALIDITY
    assert ca.not_valid_after_utc == NOW + certs.CA_VALIDITY and certs.CA_VALIDITY >= 10 * certs.VALIDITY
    assert os.stat(made.key).st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "ca.key").st_mode & 0o777 == 0o600
    # The cert-manager names (and the CA's key), each a link into ..data as in a mounted Secret.
    assert {p.name for p in tmp_path.iterdir() if not p.name.startswith("..")} == {
        "tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert os.readlink(made.cert) == "..data/tls.crt" and os.readlink(tmp_path / "ca.key") == "..data/ca.key"


def test_reissuing_switches_every_file_at_once_and_keeps_one_previous_version(tmp_path):
    first = certs.issue(tmp_path, ["127.0.0.1"]).cert.read_bytes()
    certs.issue(tmp_path, ["127.0.0.1"])
    third = certs.issue(tmp_path, ["127.0.0.1"])
    assert third.cert.read_bytes() != first
    load(third.cert).verify_directly_issued_by(load(third.ca))
    versions = [p for p in tmp_path.iterdir() if p.name.startswith("..") and not p.is_symlink()]
    assert len(versions) == 2


def test_ensure_keeps_a_good_certificate(tmp_path):
    made = certs.issue(tmp_path, ["127.0.0.1"], now=NOW)
    before = made.cert.read_bytes()
    assert certs.ensure(tmp_path, ["127.0.0.1"], now=NOW + datetime.timedelta(days=300)).cert.read_bytes() == before


@pytest.mark.parametrize(("hosts", "later"), [
    (["127.0.0.1"], certs.VALIDITY - certs.RENEW_WITHIN + datetime.timedelta(days=1)),  # about to expire
    (["mountwarden.example"], datetime.timedelta(0)),  # does not cover the host
])
def test_ensure_renews_a_certificate_that_will_not_do(tmp_path, hosts, later):
    made = certs.issue(tmp_path, ["127.0.0.1"], now=NOW)
    before = made.cert.read_bytes()
    renewed = certs.ensure(tmp_path, hosts, now=NOW + later)
    assert renewed.cert.read_bytes() != before and certs.covers(renewed.cert, hosts)


#: When the serving certificate issued at NOW has less than RENEW_WITHIN left.
DUE = NOW + certs.VALIDITY - certs.RENEW_WITHIN + datetime.timedelta(days=1)


def test_a_renewal_keeps_the_ca_and_signs_the_new_certificate_with_it(tmp_path):
    """The caBundle registered with the API server (ca.crt) still verifies the renewed certificate."""
    made = certs.issue(tmp_path, ["127.0.0.1"], now=NOW)
    ca_before, ca_key_before = made.ca.read_bytes(), (tmp_path / "ca.key").read_bytes()
    cert_before, key_before = made.cert.read_bytes(), made.key.read_bytes()
    renewed = certs.ensure(tmp_path, ["127.0.0.1"], now=DUE)
    assert renewed.cert.read_bytes() != cert_before and renewed.key.read_bytes() != key_before
    assert renewed.ca.read_bytes() == ca_before and (tmp_path / "ca.key").read_bytes() == ca_key_before
    cert = load(renewed.cert)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))
    assert cert.not_valid_after_utc == DUE + certs.VALIDITY <= load(renewed.ca).not_valid_after_utc
    assert os.stat(tmp_path / "ca.key").st_mode & 0o777 == 0o600
    # A host the certificate did not cover: renewed from the same CA too.
    wider = certs.ensure(tmp_path, ["127.0.0.1", "mountwarden.example"], now=DUE)
    assert wider.ca.read_bytes() == ca_before and certs.covers(wider.cert, ["mountwarden.example"])
    load(wider.cert).verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))


def test_a_ca_near_its_end_is_replaced_with_the_certificate(tmp_path):
    """A CA that would end before a certificate signed now: a new CA, which outlasts the certificate."""
    made = certs.issue(tmp_path, ["127.0.0.1"], now=NOW)
    ca_before = made.ca.read_bytes()
    late = NOW + certs.CA_VALIDITY - certs.CA_RENEW_WITHIN + datetime.timedelta(days=1)
    renewed = certs.ensure(tmp_path, ["127.0.0.1"], now=late)
    assert renewed.ca.read_bytes() != ca_before
    ca, cert = load(renewed.ca), load(renewed.cert)
    cert.verify_directly_issued_by(ca)
    assert ca.not_valid_after_utc == late + certs.CA_VALIDITY > cert.not_valid_after_utc
    # One day earlier the old CA still outlasted a new certificate and a renewal window: kept.
    again = tmp_path / "again"
    certs.issue(again, ["127.0.0.1"], now=NOW)
    kept = (again / "ca.crt").read_bytes()
    assert certs.renew(again, ["127.0.0.1"], now=late - datetime.timedelta(days=2)).ca.read_bytes() == kept


def test_a_ca_whose_key_is_missing_or_not_its_own_is_replaced(tmp_path):
    """A directory made before the CA's key was kept, or a key that does not sign for this CA."""
    made = certs.issue(tmp_path / "keyless", ["127.0.0.1"], now=NOW)
    (tmp_path / "keyless" / "ca.key").unlink()
    ca_before = made.ca.read_bytes()
    renewed = certs.ensure(tmp_path / "keyless", ["127.0.0.1"], now=DUE)
    assert renewed.ca.read_bytes() != ca_before
    load(renewed.cert).verify_directly_issued_by(load(renewed.ca))
    assert (tmp_path / "keyless" / "ca.key").exists()

    other = certs.issue(tmp_path / "other", ["127.0.0.1"], now=NOW)
    mismatched = certs.issue(tmp_path / "mismatched", ["127.0.0.1"], now=NOW)
    ca_before = mismatched.ca.read_bytes()
    key_link = tmp_path / "mismatched" / "ca.key"
    key_link.unlink()
    key_link.write_bytes((tmp_path / "other" / "ca.key").read_bytes())
    assert other.ca.read_bytes() != ca_before
    renewed = certs.renew(tmp_path / "mismatched", ["127.0.0.1"], now=DUE)
    assert renewed.ca.read_bytes() not in (ca_before, other.ca.read_bytes())
    load(renewed.cert).verify_directly_issued_by(load(renewed.ca))


def test_ensure_fills_an_empty_directory_and_replaces_garbage(tmp_path):
    assert certs.covers(certs.ensure(tmp_path / "new", ["127.0.0.1"]).cert, ["127.0.0.1"])
    for name in ("tls.crt", "tls.key", "ca.crt", "ca.key"):
        (tmp_path / "plain" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "plain" / name).write_text("not PEM")
    assert certs.covers(certs.ensure(tmp_path / "plain", ["127.0.0.1"]).cert, ["127.0.0.1"])


def test_require_names_what_is_missing(tmp_path):
    (tmp_path / "tls.crt").write_text("x")
    with pytest.raises(certfiles.CertificateError, match=r"lacks tls.key: mount the TLS Secret"):
        certfiles.require(tmp_path)
    (tmp_path / "tls.key").write_text("x")
    assert certfiles.require(tmp_path) == certfiles.ServingCertificate(tmp_path / "tls.crt", tmp_path / "tls.key", None)


def test_made_in_a_child_process_a_certificate_is_issued_kept_while_good_and_a_failure_says_why(tmp_path):
    made = certfiles.make(tmp_path / "local", ["127.0.0.1"], keep_good=False)
    load(made.cert).verify_directly_issued_by(load(made.ca))
    assert certs.covers(made.cert, ["127.0.0.1"]) and os.stat(made.key).st_mode & 0o777 == 0o600
    before = made.cert.read_bytes()
    assert certfiles.make(tmp_path / "local", ["127.0.0.1"], keep_good=True).cert.read_bytes() == before
    assert certfiles.make(tmp_path / "local", ["127.0.0.1"], keep_good=False).cert.read_bytes() != before
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(certfiles.CertificateError, match=r"making the webhook certificate in .*file failed "
                                                         r"\(exit code 1\): \w+Error: "):
        certfiles.make(tmp_path / "file", ["127.0.0.1"], keep_good=False)


#: Starts the operator's local webhook server, certificate made, in a fresh interpreter: the modules it loaded.
LOCAL_WEBHOOK = """
import json, sys
from mountwarden.adapters.webhookconfig import local_server
from mountwarden.handlers.runner import register_handlers
from mountwarden.handlers.config import OperatorConfig

register_handlers(OperatorConfig())
server = local_server(None, host="127.0.0.1", port=None, cert_dir=sys.argv[1])
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("cryptography", "OpenSSL"))))
"""


def test_the_operator_never_loads_cryptography_even_making_its_certificate(tmp_path):
    # Some 10 MiB of resident memory, kept for good (mountwarden.adapters.certfiles).
    done = subprocess.run([sys.executable, "-c", LOCAL_WEBHOOK, str(tmp_path)], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert certs.covers(certfiles.require(tmp_path).cert, ["127.0.0.1"])


class RecordingRegistrar:
    """Stands in for the Kubernetes API: records what would be registered."""

    def __init__(self) -> None:
        self.configs: list[dict] = []
        self.withdrawn = False

    def serving(self, client_config) -> None:
        self.configs.append(dict(client_config))

    def withdraw(self) -> None:
        self.withdrawn = True


async def handshake(port: int, ca_bundle_b64: str) -> None:
    context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle_b64).decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.close()
    await writer.wait_closed()


async def never_called(request, **_):
    raise AssertionError("no admission request is sent in this test")


def test_a_rotated_certificate_is_served_and_registered_with_its_new_ca(tmp_path):
    certs.issue(tmp_path, ["127.0.0.1"])
    registrar = RecordingRegistrar()
    server = local_server(registrar, host="127.0.0.1", port=None, cert_dir=str(tmp_path), file_check_interval=0.05)

    async def scenario() -> tuple[dict, dict]:
        configs = server(never_called)
        first = await anext(configs)
        port = server.port
        await handshake(port, first["caBundle"])

        # kopf takes the files' digest when resumed after a yield, as the operator resumes it at once.
        restarted = asyncio.ensure_future(anext(configs))
        await asyncio.sleep(0)
        certs.issue(tmp_path, ["127.0.0.1"])  # what cert-manager, or anyone, does to the directory
        second = await restarted  # the server restarts on the same port with the new files
        assert second["url"] == first["url"] == f"https://127.0.0.1:{port}"
        assert second["caBundle"] != first["caBundle"]
        await handshake(port, second["caBundle"])
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(port, first["caBundle"])
        await configs.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert registrar.configs == [first, second]  # registered at start and again after the rotation
    assert registrar.withdrawn  # and withdrawn when the server stops


def served_certificate(port: int, ca_bundle_b64: str) -> bytes:
    async def connect() -> bytes:
        context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle_b64).decode())
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        served = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        return served

    return asyncio.run(connect())


def test_a_renewed_certificate_is_served_and_the_registered_ca_bundle_still_verifies_it(tmp_path):
    """Over real TLS: after a renewal the server restarts with the new certificate, and the caBundle registered
    before it (unchanged) verifies it: the API server never trusts neither."""
    certs.issue(tmp_path, ["127.0.0.1"])
    registrar = RecordingRegistrar()
    server = local_server(registrar, host="127.0.0.1", port=None, cert_dir=str(tmp_path), file_check_interval=0.05)

    async def scenario() -> tuple[dict, dict, bytes, bytes]:
        configs = server(never_called)
        first = await anext(configs)
        port = server.port
        context = ssl.create_default_context(cadata=base64.b64decode(first["caBundle"]).decode())
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        before = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()

        restarted = asyncio.ensure_future(anext(configs))
        await asyncio.sleep(0)
        certs.renew(tmp_path, ["127.0.0.1"])
        second = await restarted  # the server restarts on the same port with the renewed files
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)  # the first caBundle
        after = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        await configs.aclose()
        return first, second, before, after

    first, second, before, after = asyncio.run(scenario())
    assert after != before and after == x509.load_pem_x509_certificate(
        (tmp_path / "tls.crt").read_bytes()).public_bytes(serialization.Encoding.DER)
    assert second["caBundle"] == first["caBundle"]
    assert registrar.configs == [first, second]
