"""Scale: the operator in a cluster of 5,000 PVs and PVCs and 20,000 pods on 100 kwok nodes.

    .venv/bin/python bench/scale.py [--pvs 5000] [--pods 20000] [--nodes 100] [--touched 1000]

A local control plane with --nodes kwok nodes is filled by a bulk loader (parallel creates
through the API): --profiles StorageProfiles, --pvs PVs of their classes pre-bound to as many
PVCs, and --pods bare pods mounting them, bound to the nodes directly. Once the PV controller has bound every
PV and every claim (bind_seconds: a settled cluster, as a change in production meets it), the operator
starts as users run it (a separate process, its HTTP requests counted at the transport), and:

- operator_ready_s: from its start until a profile created at that moment is Ready (kopf runs
  no handler before its indexes are filled, so this includes listing the cluster);
- operator_rss_mib: its peak resident memory over the whole run (sampled every 0.5 s); operator_rss_mib_at_end,
  its last sample, what it holds once the run's work is done;
- profile_change_seconds and profile_change_api_requests: one profile change (PatchBoundVolumes,
  Automatic) that touches --touched PVs, until its rollout is Complete and every one of them
  carries the new options; scale_change_requests_ratio divides the requests by the minimal
  number: one PATCH per PV, the new StorageClass (POST), the old one marked superseded (PATCH),
  the profile's status with the new version (PATCH) and its rollout's (PATCH): --touched + 4.
  Everything else a change needs to know is in the watches the operator holds already;
- the webhook under this load: PVC creates with no webhook, through the null webhook (Go), through the
  Python null webhook (bench/pythonnull.py, a process of its own: the floor of answering in Python) and
  through mountwarden's, interleaved (bench/admission.py): under_load_* figures.

With --memory-profile, the operator's memory over time and what it holds near its peak
(bench/memprofile.py). With --webhook-profile, a per-request trace of the operator during the
creates (bench/webhooktrace.py): where the slowest creates' time went. Writes bench/results/scale.json. Figures, not assertions.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import admission, webhooktrace  # noqa: E402
from bench.rollout import GROUP, MEMPROFILE_ENV, TRACE_ENV, VERSION, Operator, install_crds, wait  # noqa: E402
from tests.support import profile_body  # noqa: E402

RESULTS = ROOT / "bench" / "results"
NAMESPACES = 10
#: The operator's own namespace, which its webhook leaves out: the null webhook's PVCs go there.
NULL_NAMESPACE = "scale-null"
#: The Python null webhook's PVCs: the operator is told to leave it out (--exempt-namespace).
PYTHON_NULL_NAMESPACE = "scale-python-null"
#: Beyond one PATCH per PV: the new class, the old one superseded, the profile's status, its rollout's.
MINIMAL_CHANGE_WRITES = 4


def profile(name: str, cache_policy: str) -> dict:
    return profile_body(name, cache_policy, provisioner="nfs.csi.k8s.io", parameters={"server": "nfs.bench", "share": "/"},
                        rollout={"strategy": "PatchBoundVolumes", "approval": "Automatic"})


class PeakRss:
    """Samples a process's resident memory in a thread; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        #: The latest sample: at the end of the run, what the operator holds once its work is done.
        self.last = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.last = self.process.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, self.last)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def bulk(calls, workers: int = 24) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def load(api, args) -> tuple[list[str], dict[str, list[str]]]:
    """Profiles, PVs bound to PVCs, pods on nodes; returns the profile names and each one's PVs."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    nodes = [node.metadata.name for node in core.list_node().items]
    profiles = [f"scale-{n}" for n in range(args.profiles)]
    for name in profiles:
        custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", profile(name, "staging"))
    namespaces = [f"scale-{n}" for n in range(NAMESPACES)]
    bulk([lambda ns=ns: core.create_namespace({"metadata": {"name": ns}}) for ns in namespaces])
    volumes: dict[str, list[str]] = {name: [] for name in profiles}
    pv_calls, pvc_calls, pod_calls = [], [], []
    for index in range(args.pvs):
        # The first --touched PVs are the changing profile's; the rest are spread over the others.
        owner = profiles[0] if index < args.touched else profiles[1 + index % (len(profiles) - 1)]
        pv, ns = f"scale-pv-{index:05d}", namespaces[index % NAMESPACES]
        volumes[owner].append(pv)
        pv_calls.append(lambda pv=pv, ns=ns, owner=owner: core.create_persistent_volume({
            "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": f"{owner}-v1", "persistentVolumeReclaimPolicy": "Retain",
                     "claimRef": {"namespace": ns, "name": pv}, "nfs": {"server": "nfs.bench", "path": f"/{pv}"}}}))
        pvc_calls.append(lambda pv=pv, ns=ns, owner=owner: core.create_namespaced_persistent_volume_claim(ns, {
            "metadata": {"name": pv},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": f"{owner}-v1", "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}}}))
    for index in range(args.pods):
        pv_index = index % args.pvs
        pv, ns = f"scale-pv-{pv_index:05d}", namespaces[pv_index % NAMESPACES]
        pod_calls.append(lambda index=index, pv=pv, ns=ns: core.create_namespaced_pod(ns, {
            "metadata": {"name": f"scale-pod-{index:05d}"},
            "spec": {"nodeName": nodes[index % len(nodes)],
                     "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pv}}]}}))
    for calls in (pv_calls, pvc_calls, pod_calls):
        bulk(calls)
    return profiles, volumes


def bound(core) -> tuple[int, int]:
    """How many PVs and how many claims are Bound."""
    volumes = json.loads(core.list_persistent_volume(_preload_content=False).data)["items"]
    claims = json.loads(core.list_persistent_volume_claim_for_all_namespaces(_preload_content=False).data)["items"]
    return tuple(sum((item.get("status") or {}).get("phase") == "Bound" for item in items)
                 for items in (volumes, claims))


def run(args, kubeconfig: str, workdir: Path) -> dict:
    import kubernetes

    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    install_crds(api)
    started = time.monotonic()
    profiles, volumes = load(api, args)
    load_seconds = time.monotonic() - started
    # The PV controller binds the pre-bound PVs one at a time (about 80 a second on 2 CPUs), for two minutes after
    # the load: a change measured before it is done has its patches refused by the controller's writes (409) and reads
    # the cluster again for each, so the requests it counts are not the change's own. It marks the claims Bound after
    # their PVs: an operator started between the two lists the cluster beside those writes (its log at the start once
    # said "following ... 1994 unbound claims"), so its Ready time was partly the controller's.
    # Its pace falls as the cluster grows: 5,000 PVs bound in about 2 minutes, 25,000 (bench/scale_100k.py) in 26,
    # so the wait allows a fifth of a second per PV. The loader binding each pair itself (the claims first, each PV's
    # claimRef with its claim's UID, then the PV's phase, the claim's bind-completed annotation and status, 24 at a
    # time) was tried on 2026-12-07 and not kept: it bound 25,000 pairs in 500 s, but the cluster was not settled when
    # the operator started. kwok was still marking pods Running (12,607 of 20,000 Pending when every pair was Bound)
    # and kube-controller-manager still at work on them, and Ready took 8.8 s among 20,000 pods (3.3 after this wait)
    # and 51.4 s among 100,000 (18.3); waiting for every pod Running as well brought it to 5.7 s, not 3.3. The
    # controller's long bind is also the time the rest of the cluster needs to settle.
    started = time.monotonic()
    wait(lambda: min(bound(core)) >= args.pvs, f"the PV controller to bind the {args.pvs} PVs and claims",
         timeout=max(900.0, args.pvs * 0.2), interval=2)
    bind_seconds = time.monotonic() - started

    if args.memory_profile:
        os.environ[MEMPROFILE_ENV] = str(args.memory_profile.resolve())
    trace_path = workdir / "webhook-trace.json"
    if args.webhook_profile:
        os.environ[TRACE_ENV] = str(trace_path)
    operator = Operator(kubeconfig, 30.0, workdir,
                        extra_args=("--webhook-mode", "local", "--namespace", NULL_NAMESPACE,
                                    "--exempt-namespace", PYTHON_NULL_NAMESPACE))
    rss = PeakRss(operator.process.pid)
    started = time.monotonic()
    custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", profile("scale-probe", "cached"))

    def ready(name: str) -> bool:
        status = custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", name).get("status") or {}
        return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))

    try:
        wait(lambda: ready("scale-probe"), "the probe profile Ready", timeout=900, interval=0.2)
        startup = time.monotonic() - started
        wait(lambda: all(ready(name) for name in profiles), "every profile Ready", timeout=600)

        touched = volumes[profiles[0]]
        before = operator.counts()
        started = time.monotonic()
        custom.patch_cluster_custom_object(GROUP, VERSION, "storageprofiles", profiles[0],
                                           {"spec": profile(profiles[0], "cached")["spec"]})
        def status() -> dict:
            return custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", profiles[0]).get("status") or {}

        complete = wait(lambda: (s := status()).get("version") == 2 and (s.get("rollout") or {}).get("phase") ==
                        "Complete" and s["rollout"].get("targetVersion") == 2 and s, "the rollout to version 2",
                        timeout=1800, interval=0.5)
        change_seconds = time.monotonic() - started
        requests = operator.counts() - before
        touched_set, new = set(touched), complete["effectiveMountOptions"]
        patched = [pv for pv in core.list_persistent_volume().items
                   if pv.metadata.name in touched_set and pv.spec.mount_options == new]
        if len(patched) != len(touched):
            raise RuntimeError(f"the rollout is Complete with {len(patched)} of {len(touched)} PVs patched")

        namespaces = {"none": admission.NONE_NAMESPACE, "null": NULL_NAMESPACE,
                      "python_null": PYTHON_NULL_NAMESPACE, "mountwarden": "scale-webhook"}
        for namespace in (NULL_NAMESPACE, PYTHON_NULL_NAMESPACE, "scale-webhook"):
            core.create_namespace({"metadata": {"name": namespace}})
        creates: list[dict] = []
        with (admission.null_webhook(api, NULL_NAMESPACE, workdir),
              admission.python_null_webhook(api, PYTHON_NULL_NAMESPACE, workdir)):
            operator.start_profiles()
            histograms = webhooktrace.webhook_histograms(api) if args.webhook_profile else {}
            timings = admission.interleaved(
                core, namespaces, args.creates, lambda i: admission.pvc("claim", f"{profiles[1]}-v1"), trace=creates)
            if args.webhook_profile:
                histograms = (histograms, webhooktrace.webhook_histograms(api))
                operator.counts()
                write_webhook_profile(args.webhook_profile, creates, trace_path, histograms)
        admission.delete_claims(core, admission.NONE_NAMESPACE, "claim-")
    finally:
        peak = rss.stop()
        operator.stop()
    return {
        "summary": {
            "nodes": args.nodes, "pvs": args.pvs, "pvcs": args.pvs, "pods": args.pods, "profiles": args.profiles,
            "load_seconds": round(load_seconds, 1),
            "bind_seconds": round(bind_seconds, 1),
            "operator_ready_s": round(startup, 2),
            "operator_rss_mib": round(peak / 2**20, 1),
            "operator_rss_mib_at_end": round(rss.last / 2**20, 1),
            "profile_change_pvs": len(touched),
            "profile_change_seconds": round(change_seconds, 1),
            "profile_change_api_requests": sum(requests.values()),
            "profile_change_minimal_requests": len(touched) + MINIMAL_CHANGE_WRITES,
            "scale_change_requests_ratio": round(sum(requests.values()) / (len(touched) + MINIMAL_CHANGE_WRITES), 3),
            **admission.figures(timings, prefix="under_load_"),
        },
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "profile_change_requests_by_kind": dict(requests.most_common()),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_webhook_profile(path: Path, creates: list[dict], trace_path: Path, histograms: tuple) -> None:
    """The operator's per-request trace of the creates, as text in ``path``; the raw trace beside it (.raw.json, not kept in git)."""
    deadline = time.monotonic() + 30
    while not trace_path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # written in one call, but let it finish
    trace = json.loads(trace_path.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".raw.json").write_text(json.dumps({"creates": creates, "trace": trace, "histograms": histograms}))
    path.write_text(webhooktrace.report(creates, trace, histograms=histograms))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pvs", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--profiles", type=int, default=5)
    parser.add_argument("--touched", type=int, default=1000, help="PVs of the profile that changes")
    parser.add_argument("--creates", type=int, default=2000,
                        help="PVC creates timed through the webhook, on each side (2,000: the p99 is the 20th slowest)")
    parser.add_argument("--memory-profile", type=Path, help="Write the operator's memory profile (tracemalloc, "
                        "near its peak) here; slows the operator, so this run's timings are not figures.")
    parser.add_argument("--webhook-profile", type=Path, help="Trace the operator's webhook requests during the "
                        "creates (bench/webhooktrace.py) and write where the slowest creates' time went here.")
    return parser


def measure(args) -> dict:
    """The whole run in a local control plane of its own, gone afterwards."""
    from mountwarden.devcluster import local_cluster

    with tempfile.TemporaryDirectory(prefix="mountwarden-scale-") as scratch, \
            local_cluster(Path(scratch) / "cluster", nodes=args.nodes, timeout=600) as info:
        return run(args, str(info.kubeconfig), Path(scratch))


def main() -> None:
    result = measure(parser().parse_args())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
