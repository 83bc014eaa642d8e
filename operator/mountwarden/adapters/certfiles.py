"""The admission webhook's TLS files: where they are, the check that they are there, and making them apart.

The files carry the names cert-manager writes into a TLS Secret (tls.crt, tls.key, ca.crt) in the layout kubelet
gives a mounted Secret; mountwarden.adapters.certs makes them (for ``--webhook-mode local``).

The operator never imports `cryptography`: loading it costs some 10 MiB of resident memory (8.4 MiB for the modules
the certificates need and 1.4 MiB more once a key is made, measured after the operator's other imports with
/proc/self/status), which a process keeps for good, for work done once at its start. In a cluster the operator only
checks that the chart mounted the files (``require``); locally, ``make`` (below) runs mountwarden.adapters.certs in a
child process, which exits with what it loaded.
"""

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"

#: How long the child that makes the certificate may take: a Python start with `cryptography`, under emulation
#: (a lab VM without KVM starts Python 30 to 70 times slower than the host) as well.
MAKE_TIMEOUT_SECONDS = 120.0


class CertificateError(RuntimeError):
    """The certificate directory cannot serve: the message says what is missing."""


@dataclass(frozen=True)
class ServingCertificate:
    """Paths of the serving certificate, its key, and the CA the API server must trust."""

    cert: Path
    key: Path
    ca: Path | None

    @staticmethod
    def in_directory(directory: Path) -> "ServingCertificate":
        ca = directory / CA_FILE
        return ServingCertificate(directory / CERT_FILE, directory / KEY_FILE, ca if ca.exists() else None)


def require(directory: Path) -> ServingCertificate:
    """The certificate someone else provides (cert-manager, the chart); fail with what is missing."""
    found = ServingCertificate.in_directory(directory)
    missing = [path.name for path in (found.cert, found.key) if not path.exists()]
    if missing:
        raise CertificateError(
            f"the webhook certificate directory {directory} lacks {' and '.join(missing)}: mount the TLS Secret "
            "(tls.crt, tls.key) there, or run with --webhook-mode local to make one"
        )
    return found


def make(directory: Path, hosts: Sequence[str], *, keep_good: bool) -> ServingCertificate:
    """A CA and a serving certificate for ``hosts`` in ``directory``, made in a child process (see above).

    With ``keep_good``, a certificate already there that covers the hosts and is not about to expire is kept (and
    its CA with it: mountwarden.adapters.certs.ensure); otherwise a new CA and certificate are issued."""
    command = [sys.executable, "-m", "mountwarden.adapters.certs", "ensure" if keep_good else "issue",
               str(directory), *hosts]
    try:
        subprocess.run(command, capture_output=True, text=True, check=True, timeout=MAKE_TIMEOUT_SECONDS)
    except subprocess.CalledProcessError as failed:
        said = (failed.stderr or "").strip().splitlines()
        raise CertificateError(f"making the webhook certificate in {directory} failed (exit code "
                               f"{failed.returncode}): {said[-1] if said else 'it said nothing'}") from None
    except subprocess.TimeoutExpired:
        raise CertificateError(f"making the webhook certificate in {directory} took more than "
                               f"{MAKE_TIMEOUT_SECONDS:.0f} s") from None
    return require(directory)
