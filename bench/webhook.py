"""Benchmark: what the admission webhook costs, in the handler and on a real PVC create.

    python bench/webhook.py [--kubeconfig K] [--profiles 1000] [--classes 10000] [--creates 500]

1. The handler: the PVC and StorageProfile validating handlers called directly, with
   --profiles profiles and --classes StorageClasses filed in kopf's own index store by
   the operator's index functions (as the running operator holds them), over a mix of
   PVCs: a consumer on its class, on a superseded class, on an ungoverned NFS class,
   SQLite, no class at all. Pure CPU: no I/O on this path.
2. End to end: PVC creates through the real API server with no webhook, through the null
   webhook (bench/nullwebhook: Go, allows everything), through the same in Python
   (bench/pythonnull.py: aiohttp, a process of its own) and through mountwarden's,
   interleaved one by one in the same run (bench/admission.py), with --cluster-classes
   StorageClasses in the cluster and so in the operator's indexes. The operator runs as
   users run it (`mountwarden operator`, local webhook mode). Without --kubeconfig a local
   control plane is started and stopped afterwards.

Figures, in bench/results/webhook.json: handler_p50_ms/handler_p99_ms (PVC),
profile_handler_p50_ms/profile_handler_p99_ms, and for the creates each side's p50/p99,
what each webhook adds over none, and webhook_added_p50_vs_null/webhook_added_p99_vs_null
(mountwarden's added latency over the null webhook's; the goal is <= 1.5), and
python_null_added_p50_vs_null/_p99_ (the Python null webhook's, divided the same way: the floor in Python).
No figure is asserted anywhere: this script measures, the reader judges.
"""

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import percentile  # noqa: E402
from bench.rollout import CPUPROFILE_ENV, Operator  # noqa: E402
from tests.support import profile_body, wait_for  # noqa: E402

GROUP, VERSION = "mountwarden.io", "v1alpha1"
RUN = f"bench-webhook-{os.getpid()}"
#: A network class no profile governs: every PVC on it gets a warning, so an answer proves the webhook live.
PROBE_CLASS = f"{RUN}-ungoverned-nfs"
NFS = "nfs.csi.k8s.io"  # not EFS: the operator's credit watch would try AWS


def summary(name: str, seconds: list[float]) -> dict:
    return {f"{name}_p50_ms": round(percentile(seconds, 0.50) * 1000, 4),
            f"{name}_p99_ms": round(percentile(seconds, 0.99) * 1000, 4)}


# -- 1. the handler, in process ------------------------------------------------------------------------


def handler_latency(profiles: int, classes: int, samples: int) -> dict:
    import kopf
    from kopf._core.actions.execution import Outcome
    from kopf._core.engines.indexing import OperatorIndexer, OperatorIndexers
    from tests.support import operator_context

    from mountwarden.handlers import admission, indexes

    functions = {name: getattr(indexes, name) for name in
                 ("profiles_by_name", "profiles_by_consumer", "classes_by_name", "classes_by_profile", "default_classes",
                  "namespace_labels")}
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
               "status": {"storageClassName": f"{name}-v{versions}", "version": versions}},
              "profiles_by_name", "profiles_by_consumer")
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

    memo = operator_context()
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
    wait_for(condition, what=what, timeout=timeout, interval=0.2)


def warnings_of(core, namespace: str, body: dict) -> list[str]:
    """Admission warnings of a server-side dry run, from the raw response (the client does not surface them)."""
    response = core.create_namespaced_persistent_volume_claim(namespace, body, dry_run="All", _preload_content=False)
    response.release_conn()
    return response.headers.getlist("Warning")


def bulk(calls, workers: int = 16) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def index_classes(storage, classes: int, profiles: int) -> list[str]:
    """``classes`` StorageClasses labelled as versions of ``profiles`` profiles, for the operator's indexes."""
    versions = max(1, classes // profiles)
    names = [f"{RUN}-p{p}-v{v}" for p in range(profiles) for v in range(1, versions + 1)]
    bulk([lambda name=name: storage.create_storage_class({
        "metadata": {"name": name, "labels": {"mountwarden.io/profile": name.rsplit("-v", 1)[0],
                                              "mountwarden.io/version": name.rsplit("-v", 1)[1]}},
        "provisioner": NFS}) for name in names])
    return names


def end_to_end(kubeconfig: str, creates: int, classes: int, workdir: Path, cpu_profile: Path | None = None) -> dict:
    import kubernetes
    from bench import admission

    from mountwarden.adapters.kube import api_client

    client = api_client(kubeconfig)
    core = kubernetes.client.CoreV1Api(client)
    storage = kubernetes.client.StorageV1Api(client)
    custom = kubernetes.client.CustomObjectsApi(client)
    install_crds(client)
    namespaces = {"none": admission.NONE_NAMESPACE, "null": f"{RUN}-null", "python_null": f"{RUN}-python-null",
                  "mountwarden": f"{RUN}-with"}
    for name in (namespaces["null"], namespaces["python_null"], namespaces["mountwarden"]):
        core.create_namespace({"metadata": {"name": name, "labels": {"team": RUN}}})
    storage.create_storage_class({"metadata": {"name": PROBE_CLASS}, "provisioner": NFS})
    started = time.monotonic()
    indexed = index_classes(storage, classes, max(1, classes // 10))
    classes_seconds = time.monotonic() - started
    profiles = [f"{RUN}-{i}" for i in range(20)]
    for i, name in enumerate(profiles):
        custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", profile_body(
            name, "staging", provisioner=NFS, consumers={"namespaceSelector": {"matchLabels": {"team": RUN}},
                                                         "pvcSelector": {"matchLabels": {"app": f"app-{i}"}}}))

    if cpu_profile:
        os.environ[CPUPROFILE_ENV] = str(cpu_profile.resolve())
    operator = Operator(kubeconfig, 30.0, workdir, extra_args=("--webhook-mode", "local", "--namespace",
                                                               namespaces["null"], "--exempt-namespace",
                                                               namespaces["python_null"]))
    try:
        wait(lambda: all(((custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", n).get("status") or {})
                          .get("storageClassName")) for n in profiles), "the profiles reconciled", timeout=600)
        wait(lambda: warnings_of(core, namespaces["mountwarden"], admission.pvc(f"{RUN}-probe", PROBE_CLASS)),
             "the webhook answering", timeout=600)
        assert not warnings_of(core, namespaces["null"], admission.pvc(f"{RUN}-probe", PROBE_CLASS)), \
            "the operator's own namespace was warned"

        def claim(i: int) -> dict:
            storage_class = profiles[i % len(profiles)] + "-v1" if i % 3 else PROBE_CLASS
            return admission.pvc("pvc", storage_class, {"app": f"app-{i % len(profiles)}"})

        with (admission.null_webhook(client, namespaces["null"], workdir),
              admission.python_null_webhook(client, namespaces["python_null"], workdir)):
            operator.start_profiles()
            timings = admission.interleaved(core, namespaces, creates, claim)
            operator.counts()
        version = kubernetes.client.VersionApi(client).get_code().git_version
    finally:
        operator.stop()
        admission.delete_claims(core, admission.NONE_NAMESPACE, "pvc-")
        for name in (namespaces["null"], namespaces["python_null"], namespaces["mountwarden"]):
            core.delete_namespace(name)
        for name in profiles:
            custom.delete_cluster_custom_object(GROUP, VERSION, "storageprofiles", name)
        bulk([lambda name=name: storage.delete_storage_class(name) for name in [PROBE_CLASS, *indexed]])
    return {
        "kubernetes_version": version,
        "classes_in_cluster": len(indexed) + 1,
        "classes_created_seconds": round(classes_seconds, 1),
        **admission.figures(timings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="An existing cluster; default: start a local one.")
    parser.add_argument("--profiles", type=int, default=1000, help="Profiles in the handler's indexes.")
    parser.add_argument("--classes", type=int, default=10000, help="StorageClasses in the handler's indexes.")
    parser.add_argument("--samples", type=int, default=20000, help="PVC reviews timed in the handler.")
    parser.add_argument("--creates", type=int, default=500, help="PVC creates on each side: no webhook, the null "
                        "webhook, mountwarden's.")
    parser.add_argument("--cluster-classes", type=int, default=10000, help="StorageClasses in the cluster (so in "
                        "the operator's indexes) during the creates.")
    parser.add_argument("--cpu-profile", type=Path, help="Write a CPU profile of the operator's event loop during "
                        "the creates here (pyinstrument; slows it down, so this run's figures are not the benchmark's).")
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
            results.update(end_to_end(args.kubeconfig, args.creates, args.cluster_classes, workdir,
                                      args.cpu_profile))
        else:
            from mountwarden.devcluster import local_cluster

            with local_cluster(workdir / "cluster", nodes=1) as info:
                results.update(end_to_end(str(info.kubeconfig), args.creates, args.cluster_classes, workdir,
                                          args.cpu_profile))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
