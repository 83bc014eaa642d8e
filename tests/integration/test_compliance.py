"""The audit end to end on the local control plane: agent reports -> profile compliance, pod Events.

Pods run on a kwok node; a proc root assembled from real mountstats samples
carries their UIDs and PV names in kubelet paths; `mountwarden agent --once`
writes the node's report, and the operator compares it with the profiles.
"""

import contextlib
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import pytest
from tests.procroot import AssembledProcRoot, Mount, Process, assemble_proc_root
from tests.support import profile_body, report_spec, scrape, wait_for

from mountwarden.devcluster.cluster import kwok_node

pytestmark = pytest.mark.cluster

SQLITE_SHARED_RANGE = "1073741826 1073742335"


def volume_for(kube, namespace, pv, storage_class, source: dict | None = None):
    """A PV of the class, pre-bound to a PVC of the same name, as a provisioner would leave them.

    ``source``: the PV's volume source ({"csi": ...}); an in-tree NFS export of its own by default."""
    kube.core.create_persistent_volume({
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": namespace, "name": pv},
                 **(source or {"nfs": {"server": "nas.example.com", "path": f"/{pv}"}})},
    })
    kube.core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": pv},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })


def pod_with(kube, namespace, node, name, claim):
    kube.core.create_namespaced_pod(namespace, {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
    })
    return wait_for(lambda: (pod := kube.core.read_namespaced_pod(name, namespace)).status.phase == "Running"
                    and pod.metadata.uid, timeout=60, what=f"pod {name} Running")


def sqlite_proc_root(path: Path, mounts: list[Mount], database: Mount, pod_uid: str) -> AssembledProcRoot:
    """A proc root of ``mounts`` where a process of the pod ``pod_uid`` holds SQLite's shared lock on a file of
    ``database``'s volume, as a reader of a database in rollback-journal mode does."""
    cgroup = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_uid.replace('-', '_')}"
              f".slice/cri-containerd-{'c' * 64}.scope\n")
    assembled = assemble_proc_root(path, mounts, locks=None, processes=[Process(4242, cgroup=cgroup, maps="")])
    major, minor = assembled.superblocks[assembled.mount_point(database)].split(":")
    (assembled.path / "locks").write_text(
        f"1: POSIX  ADVISORY  READ  4242 {int(major):02x}:{int(minor):02x}:77 {SQLITE_SHARED_RANGE}\n")
    return assembled


def report_once(cluster, node: str, proc_root: Path, *options: str) -> None:
    """`mountwarden agent --once [OPTIONS]`: the node's report, written from ``proc_root``."""
    agent = subprocess.run([sys.executable, "-m", "mountwarden", "agent", "--once", *options, "--node-name", node,
                            "--proc-root", str(proc_root), "--kubeconfig", str(cluster.kubeconfig)],
                           capture_output=True, text=True, timeout=120)
    assert agent.returncode == 0, agent.stderr


def profile_with_a_pod(kube, namespace, node, name, cache_policy, pod) -> tuple[str, str]:
    """An NFS profile, a volume of its class and a pod on ``node`` mounting it: the PV's name and the pod's UID."""
    kube.apply_profile(profile_body(name, cache_policy, backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(name), what=f"{name}'s class")
    pv = f"pv-{name}"
    volume_for(kube, namespace, pv, f"{name}-v1")
    return pv, pod_with(kube, namespace, node, pod, pv)


def compliance(kube, name):
    return ((kube.profile(name) or {}).get("status") or {}).get("compliance")


def pod_events(kube, namespace, pod):
    return {(event.reason, event.message) for event in
            kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items}


def test_drift_shared_superblock_and_sqlite_reach_status_and_events(cluster, kube, operator, namespace, unique,
                                                                   tmp_path):
    node = cluster.node_names[1]
    strict_name, exact_name = f"drift-{unique}", f"exact-{unique}"
    # staging declares acregmin=acregmax=0 and lookupcache=positive, and the profile retrans=5; the sample
    # mounts have the defaults. Only retrans is something a shared superblock hides (kernel lab).
    kube.apply_profile(profile_body(strict_name, "staging", backend={"provisioner": "nfs.csi.k8s.io"},
                                    mountOptions=["retrans=5"]))
    # exact declares what the sample's /D mount really has.
    exact = profile_body(exact_name, "staging", backend={"provisioner": "nfs.csi.k8s.io"})
    exact["spec"].pop("cachePolicy")
    exact["spec"]["mountOptions"] = ["vers=4.2", "hard"]
    kube.apply_profile(exact)
    wait_for(lambda: kube.classes_of(strict_name) and kube.classes_of(exact_name), what="both classes")

    pvs = {"drifted": (f"pv-drift-{unique}", f"{strict_name}-v1"), "shared": (f"pv-shared-{unique}", f"{strict_name}-v1"),
           "peer": (f"pv-peer-{unique}", f"{exact_name}-v1"), "db": (f"pv-db-{unique}", f"{exact_name}-v1")}
    for pv, storage_class in pvs.values():
        volume_for(kube, namespace, pv, storage_class)
    uids = {role: pod_with(kube, namespace, node, role, pvs[role][0]) for role in pvs}

    mounts = [
        Mount(pvs["drifted"][0], pod_uid=uids["drifted"], sample_mount="/D"),
        # The strict profile's pod mounts second on a superblock the exact profile's pod made first.
        Mount(pvs["peer"][0], pod_uid=uids["peer"], superblock="shared", sample_mount="/D"),
        Mount(pvs["shared"][0], pod_uid=uids["shared"], superblock="shared"),
        Mount(pvs["db"][0], pod_uid=uids["db"], sample_mount="/D"),
    ]
    assembled = sqlite_proc_root(tmp_path / "proc", mounts, mounts[3], uids["db"])
    report_once(cluster, node, assembled.path)

    drifted = wait_for(lambda: (c := compliance(kube, strict_name)) and c["volumes"]["drifted"] == 2 and c,
                       timeout=60, what="two drifted volumes in the strict profile")
    assert drifted["volumes"] == {"compliant": 0, "drifted": 2, "unknown": 0}
    assert drifted["pods"] == {"compliant": 0, "drifted": 2, "unknown": 0}
    offenders = {o["pod"]: o for o in drifted["worstOffenders"]}
    # The shared superblock explains only retrans; stat() up to 60 s stale (acregmax) has more impact (core/impact.py).
    # The SuperblockShared finding reaches the pod as its Event (below).
    assert offenders[f"{namespace}/shared"]["reason"] == "OptionMismatch"
    assert "acregmax" in offenders[f"{namespace}/shared"]["message"]
    assert offenders[f"{namespace}/drifted"]["reason"] == "OptionMismatch"
    assert offenders[f"{namespace}/shared"]["node"] == node
    condition = kube.condition(strict_name, "Compliant")
    assert (condition["status"], condition["reason"]) == ("False", "Drifted")
    assert "acregmax" in condition["message"] or "retrans" in condition["message"]

    exact_status = wait_for(lambda: (c := compliance(kube, exact_name)) and c["volumes"]["compliant"] == 2 and c,
                            timeout=60, what="the exact profile compliant")
    assert exact_status["sqliteDatabases"] == 1
    assert kube.condition(exact_name, "Compliant")["status"] == "True"

    # Each profile's servers across the cluster: how many of its mounts, on how many nodes, how many bytes/s.
    for profile_name in (strict_name, exact_name):
        servers = wait_for(lambda name=profile_name: kube.profile(name)["status"].get("servers"),
                           what=f"status.servers of {profile_name}")
        assert sum(row["mounts"] for row in servers) == 2 and {row["nodes"] for row in servers} == {1}, servers
        assert all(row["server"] and row["readBytesPerSecond"] >= 0 and row["writeBytesPerSecond"] >= 0
                   for row in servers), servers
        # A generic NFS server is no funnel: only an NFSv3 gateway's row says so.
        assert {row["message"] for row in servers} == {""}, servers

    shared_events = wait_for(lambda: {r for r, _ in pod_events(kube, namespace, "shared")} >= {"SuperblockShared"}
                             and pod_events(kube, namespace, "shared"), what="a SuperblockShared event")
    (message,) = [m for r, m in shared_events if r == "SuperblockShared"]
    assert assembled.mount_point(mounts[1]) in message  # names the other mount
    wait_for(lambda: "MountPolicyDrift" in {r for r, _ in pod_events(kube, namespace, "drifted")},
             what="a MountPolicyDrift event")
    sqlite_events = wait_for(lambda: [m for r, m in pod_events(kube, namespace, "db") if r == "SQLiteOnNFS"],
                             what="a SQLiteOnNFS event")
    assert pvs["db"][0] in sqlite_events[0]
    assert not pod_events(kube, namespace, "peer"), "the compliant pod gets no event"


def dropped(operator, node: str) -> float:
    key = ("mountwarden_report_entries_dropped_total", (("node", node), ("reason", "other-node")))
    return scrape(operator.metrics_port).get(key, 0.0)


def test_a_node_speaks_only_of_its_own_pods(cluster, kube, operator, namespace, unique, tmp_path):
    """A forged report: the agent of one node says another node's pod mounts a drifted volume and runs SQLite."""
    home, liar = cluster.node_names[0], cluster.node_names[2]
    name = f"forged-{unique}"
    pv, uid = profile_with_a_pod(kube, namespace, home, name, "coherent", "victim")
    # coherent declares acregmax=3: the sample's /D mount drifts; a process of the pod holds a SQLite lock on it.
    mount = Mount(pv, pod_uid=uid, sample_mount="/D")
    assembled = sqlite_proc_root(tmp_path / "proc", [mount], mount, uid)
    before = dropped(operator, liar)

    report_once(cluster, liar, assembled.path)
    wait_for(lambda: dropped(operator, liar) >= before + 2, timeout=60, what="the forged entries counted")
    assert f"NodeMountReport {liar} names pod UID {uid}" in operator.logs()
    assert f"that pod is scheduled on node {home}" in operator.logs()

    # The same report from the pod's own node is believed: its Events show that the forged one would have
    # been posted, and that it was not.
    report_once(cluster, home, assembled.path)
    events = wait_for(lambda: (found := pod_events(kube, namespace, "victim")) and {
        r for r, _ in found} >= {"MountPolicyDrift", "SQLiteOnNFS"} and found, what="the home node's Events")
    assert all(f" on {home}" in message and f" on {liar}" not in message for _, message in events), events
    wait_for(lambda: (compliance(kube, name) or {}).get("volumes", {}).get("drifted") == 1,
             what="the drift in status, from the home node's report")
    kube.delete_profile(name)
    for node in (liar, home):
        kube.custom.delete_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", node)


def test_a_pods_userspace_nfs_client_is_an_event_on_the_pod(cluster, kube, operator, namespace, unique):
    """The agent's report names a pod's process that talks NFS with no kernel mount (found for real in the lab:
    tests/kernel/test_userspace_client.py): a UserspaceNFSClient Event says it is beyond the audit."""
    node = cluster.node_names[0]
    kube.core.create_namespaced_pod(namespace, {
        "metadata": {"name": "nfs-library"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}})
    uid = wait_for(lambda: (pod := kube.core.read_namespaced_pod("nfs-library", namespace)).status.phase == "Running"
                   and pod.metadata.uid, timeout=60, what="the pod Running")
    message = (f"process 4242 (nfs-cat) of pod {uid} talks NFS to an NFS server at 10.0.9.9:2049 over a socket of "
               "its own, with no kernel NFS mount")
    spec = report_spec(node, userspaceClients=[{"pid": 4242, "command": "nfs-cat", "podUid": uid,
                                                "remote": "10.0.9.9:2049", "message": message}])
    with contextlib.suppress(kubernetes.client.ApiException):  # another test's report of the node
        kube.custom.delete_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", node)
    kube.custom.create_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", {
        "apiVersion": "mountwarden.io/v1alpha1", "kind": "NodeMountReport", "metadata": {"name": node},
        "spec": {**spec, "scanTime": datetime.now(UTC).isoformat()}})
    try:
        # The operator tracks pods with claims only: of this one it knows nothing, and the node speaks of itself.
        events = wait_for(lambda: [event.message for event in kube.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node}").items
            if event.reason == "UserspaceNFSClient"], what="a UserspaceNFSClient event on the node")
        assert events[0].startswith(f"on {node}: {message}")
    finally:
        kube.custom.delete_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", node)


def test_a_pod_on_a_fargate_node_has_no_report_and_the_status_says_why(cluster, kube, operator, namespace, unique,
                                                                        request):
    """No agent runs on EKS Fargate (the chart keeps it off): the volume is unknown, explained, not asked about."""
    node = f"fargate-{unique}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        kwok_node(node, 950, {"eks.amazonaws.com/compute-type": "fargate"})))
    request.addfinalizer(lambda: cluster.kubectl("delete", "node", node, "--wait=false", check=False))
    wait_for(lambda: kube.core.read_node(node).status.conditions, timeout=60, what="the Fargate node Ready")
    name = f"fargate-{unique}"
    profile_with_a_pod(kube, namespace, node, name, "staging", "serverless")
    status = wait_for(lambda: (c := compliance(kube, name)) and c["volumes"]["unknown"] == 1 and c,
                      timeout=60, what="the Fargate pod's volume unknown")
    [offender] = status["worstOffenders"]
    assert offender["reason"] == "ReportMissing" and offender["node"] == node
    assert "EKS Fargate node" in offender["message"] and "is the mountwarden agent running" not in offender["message"]
    # Counted apart from a report a person should look for: NodeReportMissing reads ReportMissing only.
    unverified = {labels: value for (metric, labels), value in scrape(operator.metrics_port).items()
                  if metric == "mountwarden_unverified_volumes" and ("profile", name) in labels}
    assert unverified == {(("node", node), ("profile", name), ("reason", "NoAgent")): 1}
