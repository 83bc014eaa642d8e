"""The webhook's CA and serving certificate, and the server picking up a rotated one over real TLS."""

import asyncio
import base64
import datetime
import os
import ssl

import pytest
from cryptography import x509

from mountwarden.adapters import certs
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
    assert os.stat(made.key).st_mode & 0o777 == 0o600
    # The cert-manager names, each a link into ..data as in a mounted Secret.
    assert {p.name for p in tmp_path.iterdir() if not p.name.startswith("..")} == {"tls.crt", "tls.key", "ca.crt"}
    assert os.readlink(made.cert) == "..data/tls.crt"


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
    assert renewed.cert.read_bytes() != before and renewed.covers(hosts)


def test_ensure_fills_an_empty_directory_and_replaces_garbage(tmp_path):
    assert certs.ensure(tmp_path / "new", ["127.0.0.1"]).covers(["127.0.0.1"])
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / "plain" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "plain" / name).write_text("not PEM")
    assert certs.ensure(tmp_path / "plain", ["127.0.0.1"]).covers(["127.0.0.1"])


def test_require_names_what_is_missing(tmp_path):
    (tmp_path / "tls.crt").write_text("x")
    with pytest.raises(certs.CertificateError, match=r"lacks tls.key: mount the TLS Secret"):
        certs.require(tmp_path)
    (tmp_path / "tls.key").write_text("x")
    assert certs.require(tmp_path) == certs.ServingCertificate(tmp_path / "tls.crt", tmp_path / "tls.key", None)


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
