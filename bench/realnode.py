"""The real node's own costs: joining a dev cluster, and one Deployment's rollout verified on it.

A throwaway local control plane with one kwok node, then lab-node-0 (the kernel lab VM with
containerd, runc and a kubelet built from the same source) joins it: real_node_ready_s is the
time from the VM's start to its Node Ready (the dev cluster records it). mountwarden's image is
imported into its containerd (chart_import_s) and the chart installed (chart_install_s: until
helm's --wait sees the pods started); chart_active_s is from the install to one operator replica
active and the agent's report written (under emulation: the replicas' start). Then the chart's
operator rolls a one-replica Deployment out from the `cached` to the `staging` preset with
PatchBoundVolumes: realnode_rollout_s is from the profile change to the rollout Complete, that
is, until the chart's agent on the node has seen the kubelet's new mount with the new options.
Last, the failover of the fail-closed webhook: a deny profile's claim is reviewed (refused with the
operator's reason), the active replica's process is killed with SIGKILL on the node, and
failover_gap_s is from the kill to the first review again; in between, the API server refuses
the profile's claims unreviewed (failurePolicy Fail). failover_active_after says which replica
answered: the standby, or the killed one restarted by the kubelet.
Writes bench/results/realnode.json.

    .venv/bin/python bench/realnode.py
"""

import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

import kubernetes  # noqa: E402
from tests.realnode.conftest import (  # noqa: E402
    CHART_START_SECONDS,
    active_operator,
    node_report,
    operator_pods,
)
from tests.realnode.test_real_node import class_options, make_volume, pod_spec  # noqa: E402
from tests.support import Kube, profile_body, wait_for  # noqa: E402

from mountwarden.devcluster import DevCluster  # noqa: E402
from mountwarden.lab.node import NODE_NAME  # noqa: E402


def main() -> None:
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-realnode-") as scratch:
        cluster = DevCluster(Path(scratch) / "cluster", stop_with_parent=True)
        try:
            cluster.up(nodes=1)
            node = cluster.add_real_node()
            installed = time.monotonic()
            info = cluster.info()
            summary["real_node_ready_s"] = info.real_node_seconds
            summary["accelerator"] = node.vm.accelerator
            chart = json.loads(cluster.state_file.read_text())["chart"]
            summary["chart_import_s"], summary["chart_install_s"] = chart["import_seconds"], chart["install_seconds"]
            kube = Kube(kubernetes.config.new_client_from_config(config_file=str(info.kubeconfig)))
            wait_for(lambda: active_operator(kube) and node_report(kube), timeout=CHART_START_SECONDS, interval=2,
                     what="the chart's operator active and its agent's report written")
            summary["chart_active_s"] = round(time.monotonic() - installed, 1)
            summary["realnode_rollout_s"] = rollout_seconds(info.kubeconfig, node)
            summary.update(failover(cluster, info.kubeconfig, node))
        finally:
            cluster.down()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "realnode.json").write_text(json.dumps({"date": started, "summary": summary}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


def rollout_seconds(kubeconfig: Path, node) -> float:
    kube = Kube(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
    namespace, profile = "bench-realnode", "bench-realnode"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: kube.core.list_namespaced_service_account(namespace).items, what="the default ServiceAccount")
    automatic = {"strategy": "PatchBoundVolumes", "approval": "Automatic"}
    backend = {"provisioner": "nfs.csi.k8s.io"}
    kube.apply_profile(profile_body(profile, "cached", backend=backend, rollout=automatic))
    wait_for(lambda: kube.classes_of(profile), timeout=120, what="v1")
    pv = make_volume(kube, node, namespace, "pv-bench", f"{profile}-v1", class_options(kube, f"{profile}-v1"),
                     "/bench")
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec(pv, pinned=False)}},
    })
    wait_for(lambda: (pods := kube.core.list_namespaced_pod(namespace, label_selector="app=web").items)
             and pods[0].status.phase == "Running", timeout=900, interval=2, what=f"web Running on {NODE_NAME}")
    started = time.monotonic()
    kube.apply_profile(profile_body(profile, "staging", backend=backend, rollout=automatic))

    def complete():
        rollout = ((kube.profile(profile) or {}).get("status") or {}).get("rollout") or {}
        return rollout.get("phase") == "Complete" and rollout.get("targetStorageClassName") == f"{profile}-v2"

    wait_for(complete, timeout=1800, interval=1, what="the rollout Complete")
    return round(time.monotonic() - started, 1)


def failover(cluster: DevCluster, kubeconfig: Path, node) -> dict:
    """kill -9 of the active replica's process: how long a deny profile's claims go unreviewed."""
    kube = Kube(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
    namespace, profile = "bench-failover", "bench-failover"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    kube.apply_profile(profile_body(profile, "cached", backend={"provisioner": "nfs.csi.k8s.io"}, enforcement="deny",
                                    consumers={"pvcSelector": {"matchLabels": {"app": profile}}}))
    # A consumer of the profile asking for another class: refused by the operator (its reason), or unreviewed by
    # the API server while no replica answers (failurePolicy Fail).
    claim = json.dumps({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": "data", "namespace": namespace, "labels": {"app": profile}},
                        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "bench-elsewhere",
                                 "resources": {"requests": {"storage": "1Gi"}}}})

    def reviewed() -> bool:
        result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=claim, check=False)
        return f"is a consumer of StorageProfile {profile}" in result.stderr

    wait_for(reviewed, timeout=CHART_START_SECONDS, interval=2, what="the deny profile's claim reviewed")
    active = wait_for(lambda: active_operator(kube), timeout=CHART_START_SECONDS, interval=2, what="an active replica")
    wait_for(lambda: len([pod for pod in operator_pods(kube) if all(
        c.ready for c in pod.status.container_statuses or [])]) == 2, timeout=CHART_START_SECONDS, interval=2,
        what="two replicas Ready")
    uid = active.metadata.uid
    # The active pod's process on the node: the one in its pod's cgroup (cgroupfs keeps the UID's dashes).
    pid = node.vm.run(
        "for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q 'operator --peering' && "
        f"grep -qe '{uid}' -e '{uid.replace('-', '_')}' $d/cgroup 2>/dev/null && basename $d; done | sort -n"
    ).stdout.split()[0]
    node.vm.run(f"kill -9 {pid}")
    killed = time.monotonic()
    attempts = []
    # Bounded: a takeover that never comes fails the bench instead of hanging it.
    wait_for(lambda: attempts.append(1) or reviewed(), timeout=CHART_START_SECONDS, interval=0.5,
             what="a replica reviewing the deny profile's claims again after the kill")
    unreviewed = len(attempts) - 1
    gap = round(time.monotonic() - killed, 1)
    after = wait_for(lambda: active_operator(kube), timeout=CHART_START_SECONDS, interval=1, what="an active replica again")
    return {"failover_gap_s": gap, "failover_unreviewed_attempts": unreviewed,
            "failover_active_after": "the killed replica, restarted" if after.metadata.uid == uid else "the standby"}


if __name__ == "__main__":
    main()
