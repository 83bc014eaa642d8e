"""PVC creates through one API server: with no webhook, through do-nothing webhooks, through mountwarden's.

The floor a webhook is measured against is not zero: any validating webhook costs the API
server a TLS request, JSON both ways and the wait. bench/nullwebhook is that floor (Go, the
standard library, allows everything); bench/pythonnull.py is the same webhook on the stack
mountwarden's is served with (aiohttp and Python's TLS, as kopf's WebhookServer), in a process
of its own: what answering in Python at all costs. Each side gets a namespace of its own on the
same API server, and the creates are interleaved one by one, rotating which side goes first, so
that all of them see the same server, etcd and machine load:

- none: kube-system, which mountwarden's webhook always leaves out and the null ones do not select;
- null: a namespace the null webhook's configuration selects, given to the operator as its own
  (--namespace), which its webhook therefore leaves out;
- python_null (where a benchmark runs it): a namespace the Python null webhook selects, one the
  operator is told to leave out (--exempt-namespace);
- mountwarden: any other namespace.

Figures: p50/p99 of each side, the latency each webhook adds over none, and
webhook_added_p50_vs_null / webhook_added_p99_vs_null: mountwarden's added latency divided by
the null webhook's (1.0: no costlier than doing nothing); python_null_added_p50_vs_null and
_p99_: the Python null webhook's, divided the same way (the floor for any webhook in Python).
"""

import contextlib
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NULL_CONFIGURATION = "mountwarden-bench-null-webhook"
PYTHON_NULL_CONFIGURATION = "mountwarden-bench-python-null-webhook"
NONE_NAMESPACE = "kube-system"
SIDES = ("none", "null", "mountwarden")
#: The webhooks whose added latency is divided by the null webhook's: mountwarden's, and the Python floor where run.
RATIOS = {"mountwarden": "webhook", "python_null": "python_null"}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def build_null_webhook(out_dir: Path) -> Path:
    binary = out_dir / "nullwebhook"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=ROOT / "bench" / "nullwebhook", check=True)
    return binary


@contextlib.contextmanager
def null_webhook(client, namespace: str, workdir: Path) -> Iterator[str]:
    """Serve and register the Go null webhook for PVC creates in ``namespace``; yields its address."""
    with _serving("null", [str(build_null_webhook(workdir))], client, namespace, workdir,
                  NULL_CONFIGURATION) as address:
        yield address


@contextlib.contextmanager
def python_null_webhook(client, namespace: str, workdir: Path) -> Iterator[str]:
    """Serve and register the Python null webhook (bench/pythonnull.py) for PVC creates in ``namespace``."""
    with _serving("python-null", [sys.executable, str(ROOT / "bench" / "pythonnull.py")], client, namespace,
                  workdir, PYTHON_NULL_CONFIGURATION) as address:
        yield address


@contextlib.contextmanager
def _serving(name: str, command: list[str], client, namespace: str, workdir: Path,
             configuration: str) -> Iterator[str]:
    """Start ``command`` (it takes bench/nullwebhook's arguments), register it for ``namespace``; yield its address."""
    import kubernetes

    from mountwarden.adapters import certs

    certificate = certs.issue(workdir / f"{name}-webhook-certs", ["127.0.0.1"])
    process = subprocess.Popen([*command, "-listen", "127.0.0.1:0", "-cert", str(certificate.cert),
                                "-key", str(certificate.key)], stdout=subprocess.PIPE, text=True)
    admission = kubernetes.client.AdmissionregistrationV1Api(client)
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip().removeprefix("listening on ")
        if not address:
            raise RuntimeError(f"the {name} webhook did not start")
        # As mountwarden's PVC webhook is registered (adapters/webhookconfig.py), but for one namespace.
        admission.create_validating_webhook_configuration({
            "metadata": {"name": configuration},
            "webhooks": [{
                "name": f"{name}.bench.mountwarden.io",
                "clientConfig": {"url": f"https://{address}/", "caBundle": _base64(certificate.ca.read_bytes())},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumeclaims"],
                           "operations": ["CREATE"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}]},
                "failurePolicy": "Ignore", "matchPolicy": "Equivalent", "sideEffects": "None",
                "timeoutSeconds": 3, "admissionReviewVersions": ["v1"],
            }],
        })
        yield address
    finally:
        with contextlib.suppress(kubernetes.client.ApiException):
            admission.delete_validating_webhook_configuration(configuration)
        process.terminate()
        process.wait(timeout=10)


def _base64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def pvc(name: str, storage_class: str, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteMany"],
                     "resources": {"requests": {"storage": "1Gi"}}}}


def interleaved(core, namespaces: dict[str, str], creates: int, body: Callable[[int], dict],
                warmup: int = 10, trace: list[dict] | None = None) -> dict[str, list[float]]:
    """``creates`` PVC creates per side, one side after the other, rotating who goes first; seconds each.

    With ``trace``, each timed create is appended to it: side, namespace, name, start and end (time.perf_counter,
    CLOCK_MONOTONIC, as in the operator's trace: bench/webhooktrace.py).
    """
    timings: dict[str, list[float]] = {side: [] for side in namespaces}
    sides = list(namespaces)
    for index in range(-warmup, creates):
        order = sides[index % len(sides):] + sides[:index % len(sides)]
        for side in order:
            claim = body(index)
            claim["metadata"]["name"] = f"{claim['metadata']['name']}-{'w' if index < 0 else ''}{abs(index)}"
            started = time.perf_counter()
            core.create_namespaced_persistent_volume_claim(namespaces[side], claim)
            if index >= 0:
                ended = time.perf_counter()
                timings[side].append(ended - started)
                if trace is not None:
                    trace.append({"side": side, "namespace": namespaces[side], "name": claim["metadata"]["name"],
                                  "start": started, "end": ended})
    return timings


def delete_claims(core, namespace: str, prefix: str) -> None:
    for claim in core.list_namespaced_persistent_volume_claim(namespace).items:
        if claim.metadata.name.startswith(prefix):
            core.delete_namespaced_persistent_volume_claim(claim.metadata.name, namespace)


def figures(timings: dict[str, list[float]], prefix: str = "") -> dict:
    """p50/p99 per side, what each webhook adds over none, and each added latency over the null webhook's."""
    result: dict = {f"{prefix}creates_each": len(timings["none"])}
    sides = [side for side in (*SIDES, "python_null") if side in timings]
    ms = {side: {q: percentile(timings[side], q) * 1000 for q in (0.5, 0.99)} for side in sides}
    for side in sides:
        result[f"{prefix}{side}_p50_ms"] = round(ms[side][0.5], 3)
        result[f"{prefix}{side}_p99_ms"] = round(ms[side][0.99], 3)
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        null_added = ms["null"][q] - ms["none"][q]
        result[f"{prefix}null_added_{name}_ms"] = round(null_added, 3)
        for side, key in RATIOS.items():
            if side not in ms:
                continue
            added = ms[side][q] - ms["none"][q]
            result[f"{prefix}{side}_added_{name}_ms"] = round(added, 3)
            # A null webhook that adds nothing measurable leaves no ratio to speak of.
            result[f"{prefix}{key}_added_{name}_vs_null"] = round(added / null_added, 3) if null_added > 0.05 else None
    return result
