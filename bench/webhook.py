"""Benchmark: what the admission webhook costs, in the handler and on a real PVC create.

    python bench/webhook.py [--kubeconfig K] [--profiles 1000] [--classes 10000] [--creates 500]

1. The handler: the PVC and StorageProfile validating handlers called directly, with
   --profiles profiles and --classes StorageClasses filed in kopf's own index store by
   the operator's index functions (as the running operator holds them), over a mix of
   PVCs: a consumer on its class, on a superseded class, on an ungoverned NFS class,
   SQLite, no class at all. Pure CPU: no I/O on this path.
2. End to end: PVC creates through the real API server, with the webhook and without,
   interleaved one by one in the same run so that both see the same API server and
   etcd: the operator runs as users run it (`mountwarden operator`, local webhook mode)
   with --namespace naming the "without" namespace, which its webhook configuration
   therefore leaves out. Without --kubeconfig a local control plane is started and
   stopped afterwards.

Figures, in bench/results/webhook.json: handler_p50_ms/handler_p99_ms (PVC),
profile_handler_p50_ms/profile_handler_p99_ms, and for the creates without_webhook_*,
webhook_p50_ms/webhook_p99_ms, added_p50_ms/added_p99_ms and the ratios of the two.
No figure is asserted anywhere: this script measures, the reader judges.
"""

import argparse
import asyncio
import json
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "mountwarden.io", "v1alpha1"
RUN = f"bench-webhook-{os.getpid()}"
#: A network class no profile governs: every PVC on it gets a warning, so an answer proves the webhook live.
PROBE_CLASS = f"{RUN}-ungoverned-nfs"
NFS = "nfs.csi.k8s.io"  # not EFS: the operator's credit watch would try AWS


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(name: str, seconds: list[float]) -> dict:
    return {f"{name}_p50_ms": round(percentile(seconds, 0.50) * 1000, 4),
            f"{name}_p99_ms": round(percentile(seconds, 0.99) * 1000, 4)}


# -- 1. the handler, in process ------------------------------------------------------------------------


def handler_latency(profiles: int, classes: int, samples: int) -> dict:
    import kopf
    from kopf._core.actions.execution import Outcome
    from kopf._core.engines.indexing import OperatorIndexer, OperatorIndexers

    from mountwarden.handlers import admission, indexes
    from mountwarden.handlers.config import OperatorConfig

    functions = {name: getattr(indexes, name) for name in
                 ("profiles_by_name", "classes_by_name", "classes_by_profile", "default_classes", "namespace_labels")}
    indexers = OperatorIndexers()
    for name in [*functions, "volumes_by_class"]:
        indexers[name] = OperatorIndexer()

    def index(obj: dict, *names: str) -> None:
        body = kopf.Body(obj)
        kwargs = dict(body=body, name=body.metadata.name, spec=body.spec, status=body.status,
                      labels=body.metadata.labels, annotations=body.metadata.annotations)
        indexers.replace(body, {n: Outcome(final=True, result=functions[n](**kwargs)) for n in names})

    versions = max(1, classes // profiles)
    for i in range(profiles):
        name = f"profile-{i}"
        index({"metadata": {"name": name, "uid": name},
               "spec": {"backend": {"provisioner": NFS}, "cachePolicy": "staging",
                        "consumers": {"namespaceSelector": {"matchLabels": {"team": f"team-{i % 200}"}},
                                      "pvcSelector": {"matchLabels": {"app": f"app-{i}"}}}},
               "status": {"storageClassName": f"{name}-v{versions}", "version": versions}}, "profiles_by_name")
        for v in range(1, versions + 1):
            annotations = {} if v == versions else {"mountwarden.io/superseded-by": f"{name}-v{versions}"}
            index({"metadata": {"name": f"{name}-v{v}", "uid": f"{name}-v{v}", "annotations": annotations,
                                "labels": {"mountwarden.io/profile": name, "mountwarden.io/version": str(v)}},
                   "provisioner": NFS}, "classes_by_name", "classes_by_profile", "default_classes")
    index({"metadata": {"name": "efs-raw", "uid": "efs-raw"}, "provisioner": "efs.csi.aws.com"},
          "classes_by_name", "classes_by_profile", "default_classes")
    for t in range(200):
        index({"metadata": {"name": f"ns-{t}", "uid": f"ns-{t}", "labels": {"team": f"team-{t}"}}}, "namespace_labels")
    indexes = {name: indexer.index for name, indexer in indexers.items()}

    def claim(i: int) -> kopf.Body:
        p = i % profiles
        storage_class = [f"profile-{p}-v{versions}", f"profile-{p}-v1", "efs-raw", None][i % 4]
        annotations = {"mountwarden.io/contents": "sqlite"} if i % 5 == 0 else {}
        spec = {"storageClassName": storage_class} if storage_class else {}
        return kopf.Body({"metadata": {"name": f"pvc-{i}", "namespace": f"ns-{p % 200}",
                                       "labels": {"app": f"app-{p}"}, "annotations": annotations}, "spec": spec})

    def profile_update(i: int) -> kopf.Body:
        p = i % profiles
        return kopf.Body({"metadata": {"name": f"profile-{p}"},
                          "spec": {"backend": {"provisioner": NFS}, "cachePolicy": "cached",
                                   "consumers": {"pvcSelector": {"matchLabels": {"app": f"app-{p}"}}}},
                          "status": {"storageClassName": f"profile-{p}-v{versions}", "version": versions}})

    ready = threading.Event()
    ready.set()
    memo = kopf.Memo(config=OperatorConfig(), admission_ready=ready, webhook_registrar=None)
    logger = logging.getLogger("bench")
    claims = [claim(i) for i in range(samples)]
    updates = [profile_update(i) for i in range(max(1, samples // 10))]
    old = kopf.Body({"spec": {}})

    async def measure() -> tuple[list[float], list[float], int]:
        pvc_times, profile_times, denied = [], [], 0
        for body in claims:
            warnings: list[str] = []
            started = time.perf_counter()
            try:
                await admission.validate_pvc(body=body, warnings=warnings, memo=memo, logger=logger, **indexes)
            except kopf.AdmissionError:
                denied += 1
            pvc_times.append(time.perf_counter() - started)
        for body in updates:
            started = time.perf_counter()
            await admission.validate_profile(name=body.metadata.name, body=body, old=old, operation="UPDATE",
                                             warnings=[], memo=memo, logger=logger, **indexes)
            profile_times.append(time.perf_counter() - started)
        return pvc_times, profile_times, denied

    pvc_times, profile_times, denied = asyncio.run(measure())
    return {
        "indexed_profiles": profiles,
        "indexed_classes": sum(len(store) for store in indexes["classes_by_name"].values()),
        "handler_samples": len(pvc_times),
        "handler_denials": denied,
        **summary("handler", pvc_times),
        "profile_handler_samples": len(profile_times),
        **summary("profile_handler", profile_times),
    }


# -- 2. PVC creates through the API server -----------------------------------------------------------


def install_crds(client) -> None:
    import kubernetes

    api = kubernetes.client.ApiextensionsV1Api(client)
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        try:
            api.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        except kubernetes.client.ApiException as error:
            if error.status != 409:
                raise
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        wait(lambda n=name: any(c.type == "Established" and c.status == "True" for c in
                                api.read_custom_resource_definition(n).status.conditions or []), f"CRD {name}")


def wait(condition, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def pvc(name: str, storage_class: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteMany"],
                                                 "resources": {"requests": {"storage": "1Gi"}}}}


def warnings_of(core, namespace: str, body: dict) -> list[str]:
    """Admission warnings of a server-side dry run, from the raw response (the client does not surface them)."""
    response = core.create_namespaced_persistent_volume_claim(namespace, body, dry_run="All", _preload_content=False)
    response.release_conn()
    return response.headers.getlist("Warning")


def end_to_end(kubeconfig: str, creates: int, workdir: Path) -> dict:
    import kubernetes

    from mountwarden.adapters.kube import api_client

    client = api_client(kubeconfig)
    core = kubernetes.client.CoreV1Api(client)
    storage = kubernetes.client.StorageV1Api(client)
    custom = kubernetes.client.CustomObjectsApi(client)
    install_crds(client)
    with_webhook, without_webhook = f"{RUN}-with", f"{RUN}-without"
    for name in (with_webhook, without_webhook):
        core.create_namespace({"metadata": {"name": name, "labels": {"team": RUN}}})
    storage.create_storage_class({"metadata": {"name": PROBE_CLASS}, "provisioner": NFS})
    profiles = [f"{RUN}-{i}" for i in range(20)]
    for i, name in enumerate(profiles):
        custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "StorageProfile", "metadata": {"name": name},
            "spec": {"backend": {"provisioner": NFS}, "cachePolicy": "staging",
                     "consumers": {"namespaceSelector": {"matchLabels": {"team": RUN}},
                                   "pvcSelector": {"matchLabels": {"app": f"app-{i}"}}}}})

    log = (workdir / "operator.log").open("w")
    operator = subprocess.Popen(
        [sys.executable, "-m", "mountwarden", "operator", "--kubeconfig", kubeconfig, "--metrics-port", "0",
         "--webhook-mode", "local", "--namespace", without_webhook],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        wait(lambda: all(((custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", n).get("status") or {})
                          .get("storageClassName")) for n in profiles), "the profiles reconciled")
        wait(lambda: warnings_of(core, with_webhook, pvc(f"{RUN}-probe", PROBE_CLASS)), "the webhook answering")
        assert not warnings_of(core, without_webhook, pvc(f"{RUN}-probe", PROBE_CLASS)), "excluded namespace warned"

        timings: dict[str, list[float]] = {with_webhook: [], without_webhook: []}
        for i in range(creates):
            # Alternate which goes first, so that neither side always follows the other's write.
            order = (with_webhook, without_webhook) if i % 2 == 0 else (without_webhook, with_webhook)
            storage_class = profiles[i % len(profiles)] + "-v1" if i % 3 else PROBE_CLASS
            for namespace in order:
                body = pvc(f"pvc-{i}", storage_class)
                body["metadata"]["labels"] = {"app": f"app-{i % len(profiles)}"}
                started = time.perf_counter()
                core.create_namespaced_persistent_volume_claim(namespace, body)
                timings[namespace].append(time.perf_counter() - started)
        version = kubernetes.client.VersionApi(client).get_code().git_version
    finally:
        os.killpg(operator.pid, signal.SIGTERM)
        operator.wait(timeout=30)
        log.close()
        for name in (with_webhook, without_webhook):
            core.delete_namespace(name)
        for name in profiles:
            custom.delete_cluster_custom_object(GROUP, VERSION, "storageprofiles", name)
        storage.delete_storage_class(PROBE_CLASS)

    with_ = summary("webhook", timings[with_webhook])
    without = summary("without_webhook", timings[without_webhook])
    return {
        "kubernetes_version": version,
        "creates_each": creates,
        **without,
        **with_,
        "added_p50_ms": round(with_["webhook_p50_ms"] - without["without_webhook_p50_ms"], 4),
        "added_p99_ms": round(with_["webhook_p99_ms"] - without["without_webhook_p99_ms"], 4),
        "ratio_p50": round(with_["webhook_p50_ms"] / without["without_webhook_p50_ms"], 3),
        "ratio_p99": round(with_["webhook_p99_ms"] / without["without_webhook_p99_ms"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="An existing cluster; default: start a local one.")
    parser.add_argument("--profiles", type=int, default=1000, help="Profiles in the handler's indexes.")
    parser.add_argument("--classes", type=int, default=10000, help="StorageClasses in the handler's indexes.")
    parser.add_argument("--samples", type=int, default=20000, help="PVC reviews timed in the handler.")
    parser.add_argument("--creates", type=int, default=500, help="PVC creates with, and as many without, the webhook.")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "webhook.json")
    args = parser.parse_args()

    results = {
        "started_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        **handler_latency(args.profiles, args.classes, args.samples),
    }
    with tempfile.TemporaryDirectory(prefix="mountwarden-bench-") as scratch:
        workdir = Path(scratch)
        if args.kubeconfig:
            results.update(end_to_end(args.kubeconfig, args.creates, workdir))
        else:
            from mountwarden.devcluster import local_cluster

            with local_cluster(workdir / "cluster", nodes=1) as info:
                results.update(end_to_end(str(info.kubeconfig), args.creates, workdir))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
