"""PVC creates through one API server: with no webhook, through a do-nothing webhook, through mountwarden's.

The floor a webhook is measured against is not zero: any validating webhook costs the API
server a TLS request, JSON both ways and the wait. bench/nullwebhook is that floor (Go, the
standard library, allows everything). Each side gets a namespace of its own on the same API
server, and the creates are interleaved one by one, rotating which side goes first, so that
all three see the same server, etcd and machine load:

- none: kube-system, which mountwarden's webhook always leaves out and the null one does not select;
- null: a namespace the null webhook's configuration selects, given to the operator as its own
  (--namespace), which its webhook therefore leaves out;
- mountwarden: any other namespace.

Figures: p50/p99 of each side, the latency each webhook adds over none, and
webhook_added_p50_vs_null / webhook_added_p99_vs_null: mountwarden's added latency divided by
the null webhook's (1.0: no costlier than doing nothing).
"""

import contextlib
import math
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NULL_CONFIGURATION = "mountwarden-bench-null-webhook"
NONE_NAMESPACE = "kube-system"
SIDES = ("none", "null", "mountwarden")


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
    """Serve and register the null webhook for PVC creates in ``namespace``; yields its address."""
    import kubernetes

    from mountwarden.adapters import certs

    binary = build_null_webhook(workdir)
    certificate = certs.issue(workdir / "null-webhook-certs", ["127.0.0.1"])
    process = subprocess.Popen([str(binary), "-listen", "127.0.0.1:0", "-cert", str(certificate.cert),
                                "-key", str(certificate.key)], stdout=subprocess.PIPE, text=True)
    admission = kubernetes.client.AdmissionregistrationV1Api(client)
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip().removeprefix("listening on ")
        if not address:
            raise RuntimeError("the null webhook did not start")
        # As mountwarden's PVC webhook is registered (adapters/webhookconfig.py), but for one namespace.
        admission.create_validating_webhook_configuration({
            "metadata": {"name": NULL_CONFIGURATION},
            "webhooks": [{
                "name": "null.bench.mountwarden.io",
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
            admission.delete_validating_webhook_configuration(NULL_CONFIGURATION)
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
    """p50/p99 per side, what each webhook adds over none, and mountwarden's added over the null webhook's."""
    result: dict = {f"{prefix}creates_each": len(timings["none"])}
    ms = {side: {q: percentile(timings[side], q) * 1000 for q in (0.5, 0.99)} for side in SIDES}
    for side in SIDES:
        result[f"{prefix}{side}_p50_ms"] = round(ms[side][0.5], 3)
        result[f"{prefix}{side}_p99_ms"] = round(ms[side][0.99], 3)
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        null_added = ms["null"][q] - ms["none"][q]
        mountwarden_added = ms["mountwarden"][q] - ms["none"][q]
        result[f"{prefix}null_added_{name}_ms"] = round(null_added, 3)
        result[f"{prefix}mountwarden_added_{name}_ms"] = round(mountwarden_added, 3)
        # A null webhook that adds nothing measurable leaves no ratio to speak of.
        result[f"{prefix}webhook_added_{name}_vs_null"] = (round(mountwarden_added / null_added, 3)
                                                          if null_added > 0.05 else None)
    return result
