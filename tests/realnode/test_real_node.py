"""A real node: a kubelet mounting real NFS for pods, audited and rolled out by mountwarden.

lab-node-0 is the kernel lab VM joined to the local control plane (containerd and runc from
Debian, a kubelet from the same Kubernetes source, a kernel NFS server beside it), with the chart
installed on it from mountwarden's own image: its operator replicas reconcile, and its agent's pod
writes the NodeMountReport that drives compliance. PersistentVolumes are in-tree NFS on the node's
loopback carrying their StorageClass's mountOptions, as a provisioner would copy them; what the pods
get is what this kernel and this kubelet really do with them.
"""

import json
import subprocess
import sys
import time

import kubernetes
import pytest
from tests.integration.test_compliance import compliance, pod_events
from tests.realnode.conftest import (
    CHART_START_SECONDS,
    MODULE_TIMEOUT,
    active_operator,
    operator_pods,
    scale_operator,
)
from tests.support import profile_body, wait_for

from mountwarden.lab.node import NFS_SERVER, NODE_NAME, TOOLS_IMAGE

TIMEOUT = 600  # a pod under TCG: sandbox, image, NFS mount, container
#: The node's start (boot, image import, the chart's replicas) is the first test's.
pytestmark = pytest.mark.timeout(MODULE_TIMEOUT)


def make_volume(kube, real_node, namespace: str, name: str, storage_class: str, options: list[str],
                path: str) -> str:
    """A PV on the node's NFS server, pre-bound to a claim of the same name, with the class's options."""
    real_node.vm.run(f"mkdir -p /srv/export{path} && chmod 1777 /srv/export{path}")
    kube.core.create_persistent_volume({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain", "mountOptions": options,
                 "nfs": {"server": NFS_SERVER, "path": f"/srv/export{path}"},
                 "claimRef": {"namespace": namespace, "name": name}},
    })
    kube.core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class, "volumeName": name,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    return name


def options_profile(name: str, options: list[str]) -> dict:
    """A profile of explicit options on a generic NFS backend, no preset."""
    body = profile_body(name, backend={"provisioner": "nfs.csi.k8s.io"}, mountOptions=options)
    body["spec"].pop("cachePolicy")
    return body


def pod_spec(claim: str, command: str = "sleep 100000", *, pinned: bool = True) -> dict:
    placement = {"nodeName": NODE_NAME} if pinned else {"nodeSelector": {"kubernetes.io/hostname": NODE_NAME}}
    return {
        **placement, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": TOOLS_IMAGE, "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", command],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }


def run_pod(kube, namespace: str, name: str, claim: str, command: str = "sleep 100000") -> str:
    kube.core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": pod_spec(claim, command)})
    return wait_for(lambda: (pod := kube.core.read_namespaced_pod(name, namespace)).status.phase == "Running"
                    and pod.metadata.uid, timeout=TIMEOUT, interval=2, what=f"pod {name} Running on {NODE_NAME}")


def reported(kube, pod_uid: str) -> dict | None:
    try:
        report = kube.custom.get_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", NODE_NAME)
    except Exception:  # not written yet
        return None
    return next((v for v in report["spec"]["volumes"] if v.get("podUid") == pod_uid), None)


#: Where the pod's sqlite3 opens its database: the volume's mount path in the container.
DATABASE = "/data/app.db"


def sqlite_reported(kube, pod_uid: str) -> list[dict]:
    try:
        report = kube.custom.get_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", NODE_NAME)
    except Exception:  # not written yet
        return []
    return [found for found in report["spec"].get("sqlite") or []
            if found.get("path") == DATABASE and found.get("podUid") == pod_uid]


def _lock_device(fields: list[str]) -> str:
    """MAJ:MIN (hex in /proc/locks) of a lock line's fields, in decimal as mountinfo prints it."""
    major, minor, _ = fields[5].split(":")
    return f"{int(major, 16)}:{int(minor, 16)}"


def class_options(kube, name: str) -> list[str]:
    return list(kube.storage.read_storage_class(name).mount_options or [])


def test_the_node_is_a_real_kubelet_on_the_lab_kernel(real_node, kube):
    node = kube.core.read_node(NODE_NAME)
    info = node.status.node_info
    assert info.kubelet_version == "v1.34.4"
    assert info.container_runtime_version.startswith("containerd://1.6")
    assert info.kernel_version.startswith("6.1")
    assert info.boot_id == real_node.vm.read_text("/proc/sys/kernel/random/boot_id").strip()
    assert "kwok.x-k8s.io/node" not in (node.metadata.annotations or {})


def test_a_volume_no_profile_governs_is_audited_adopted_and_remounted_with_the_profiles_options(
        real_node, chart, kube, namespace, unique, request, cluster):
    """Day one on a real kubelet: the chart's operator stopped (scaled to zero), an in-tree NFS PV with the import's
    flags, of a class no profile governs, its pod mounted by the kubelet; then the operator back, onto a cluster
    that already has the volume: the baseline names the flags from the kernel's own mount; a profile adopts the
    class and, once approved, the pod is restarted and the kernel's mountinfo shows the profile's options; the
    inventory shows it governed and compliant."""
    replicas = scale_operator(kube, 0)
    request.addfinalizer(lambda: scale_operator(kube, replicas))
    wait_for(lambda: not operator_pods(kube), timeout=TIMEOUT, interval=2, what="no operator replica left")
    legacy, profile = f"legacy-nfs-{unique}", f"adopter-{unique}"
    provisioner = "k8s-sigs.io/nfs-subdir-external-provisioner"
    import_flags = ["sync", "actimeo=0", "lookupcache=none"]
    kube.storage.create_storage_class({"metadata": {"name": legacy}, "provisioner": provisioner,
                                       "mountOptions": import_flags, "reclaimPolicy": "Retain"})
    request.addfinalizer(lambda: kube.storage.delete_storage_class(legacy))
    pv = make_volume(kube, real_node, namespace, f"pv-legacy-{unique}", legacy, import_flags, f"/legacy-{unique}")
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "app"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                 "template": {"metadata": {"labels": {"app": "app"}}, "spec": pod_spec(pv, pinned=False)}},
    })
    old = wait_for(lambda: running_app(kube, namespace), timeout=TIMEOUT, interval=2, what="app Running")
    kernel = mountinfo_line(real_node, old.metadata.uid, pv).split()[-1].split(",")  # the superblock's options
    assert {"sync", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0", "lookupcache=none"} <= set(kernel), kernel

    scale_operator(kube, replicas)  # installed now, onto a cluster that already has the volume
    wait_for(lambda: active_operator(kube), timeout=CHART_START_SECONDS, interval=5, what="an operator replica active")
    # The agent's writes wait for the operator (its webhook on NodeMountReports fails closed).
    wait_for(lambda: reported(kube, old.metadata.uid), timeout=TIMEOUT, what="the agent's report of its volume")

    (said,) = wait_for(lambda: [m for r, m in pod_events(kube, namespace, old.metadata.name) if r == "RoundTripOptions"],
                       timeout=TIMEOUT, interval=2, what="the baseline's RoundTripOptions Event on the pod")
    assert "sync, actimeo=0, lookupcache=none" in said and "no StorageProfile governs it: the baseline" in said
    # The Event is posted during the inventory pass that writes the object at its end: an earlier pass, before the
    # agent's report, may have written the volume's pod as unknown.
    before = wait_for(lambda: (o := netfs(kube, NFS_SERVER)) and pv in volumes_of(o)
                      and [p.get("state") for p in volumes_of(o)[pv].get("pods") or []][:1] == ["drifted"] and o,
                      timeout=TIMEOUT, what="the inventory of the node's NFS server, its pod drifted")
    assert volumes_of(before)[pv].get("governedBy") is None

    body = profile_body(profile, "cached", backend={"provisioner": provisioner, "kind": "nfs"},
                        rollout={"strategy": "PatchBoundVolumes", "approval": "Manual"},
                        adopt={"storageClassNames": [legacy]})
    kube.apply_profile(body)
    request.addfinalizer(lambda: kube.delete_profile(profile))

    def adoption() -> dict:
        return ((kube.profile(profile) or {}).get("status") or {}).get("adoption") or {}

    observed = wait_for(lambda: (a := adoption()).get("phase") == "AwaitingApproval" and a, timeout=TIMEOUT,
                        what="the adoption awaiting approval")
    assert [v["name"] for v in observed["volumes"]] == [pv]
    assert observed["workloads"] == [f"Deployment/{namespace}/app"]
    kube.custom.patch_cluster_custom_object("mountwarden.io", "v1alpha1", "storageprofiles", profile, {
        "metadata": {"annotations": {"mountwarden.io/approve-rollout": observed["approvalKey"]}}})
    wait_for(lambda: adoption().get("phase") == "Adopted", timeout=TIMEOUT * 2, interval=2,
             what="the adoption Adopted: the pod restarted and verified on the real node")
    new = running_app(kube, namespace)
    assert new is not None and new.metadata.uid != old.metadata.uid
    # The kernel's own word: the new pod's mount has the profile's options, and none of the import's flags.
    kernel = mountinfo_line(real_node, new.metadata.uid, pv).split()[-1].split(",")
    assert {"acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600"} <= set(kernel), kernel
    assert not {"sync", "lookupcache=none"} & set(kernel), kernel
    assert kube.core.read_namespaced_persistent_volume_claim(pv, namespace).spec.volume_name == pv
    after = wait_for(lambda: (o := netfs(kube, NFS_SERVER)) and (v := volumes_of(o).get(pv))
                     and v.get("governedBy") == profile and [p["state"] for p in v["pods"]] == ["compliant"] and o,
                     timeout=TIMEOUT, interval=2, what="the inventory showing the volume governed and compliant")
    (pod,) = volumes_of(after)[pv]["pods"]
    assert pod["contract"] == profile and pod["uid"] == new.metadata.uid
    result = subprocess.run([sys.executable, "-m", "mountwarden", "inventory", "--json", "--kubeconfig",
                             str(cluster.kubeconfig)], capture_output=True, text=True, timeout=120)
    (item,) = [i for i in json.loads(result.stdout)["items"] if i["name"] == NFS_SERVER]
    assert {v["name"]: v["governedBy"] for v in item["volumes"]}[pv] == profile
    kube.apps.delete_namespaced_deployment("app", namespace)


def netfs(kube, name: str) -> dict | None:
    try:
        return kube.custom.get_cluster_custom_object("mountwarden.io", "v1alpha1", "networkfilesystems", name)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def volumes_of(netfs_object: dict) -> dict[str, dict]:
    return {volume["name"]: volume for volume in netfs_object["spec"].get("volumes", [])}


def test_a_pod_mounts_real_nfs_with_its_class_options_and_is_audited(real_node, kube, chart, namespace, unique):
    profile = f"real-{unique}"
    kube.apply_profile(profile_body(profile, "cached", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(profile), what="the profile's class")
    options = class_options(kube, f"{profile}-v1")
    pv = make_volume(kube, real_node, namespace, f"pv-real-{unique}", f"{profile}-v1", options, f"/real-{unique}")
    uid = run_pod(kube, namespace, "app", pv)
    mount_point = f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~nfs/{pv}"
    mountinfo = real_node.vm.read_text("/proc/1/mountinfo")
    assert mount_point in mountinfo  # the real kubelet mounted it, where the agent expects it
    volume = wait_for(lambda: reported(kube, uid), timeout=TIMEOUT, what="the agent's report of the pod's volume")
    assert volume["mountPoint"] == mount_point and volume["optionsSource"] == "mountstats"
    assert {"acregmin=600", "acregmax=600", "lookupcache=all"} <= set(volume["effectiveOptions"])
    status = wait_for(lambda: (c := compliance(kube, profile)) and c["volumes"]["compliant"] == 1 and c,
                      timeout=TIMEOUT, what="the profile compliant from the real node's report")
    assert status["volumes"]["drifted"] == 0


def test_two_pods_that_differ_only_in_timeo_share_a_superblock(real_node, kube, chart, namespace, unique):
    """The second pod's volume silently runs with the first one's timeo: SuperblockShared, on its pod."""
    first, second = f"first-{unique}", f"second-{unique}"
    kube.apply_profile(options_profile(first, ["vers=4.1", "timeo=100"]))
    kube.apply_profile(options_profile(second, ["vers=4.1", "timeo=600"]))
    wait_for(lambda: kube.classes_of(first) and kube.classes_of(second), what="both classes")
    path = f"/shared-{unique}"
    first_pv = make_volume(kube, real_node, namespace, f"pv-a-{unique}", f"{first}-v1",
                           class_options(kube, f"{first}-v1"), path)
    second_pv = make_volume(kube, real_node, namespace, f"pv-b-{unique}", f"{second}-v1",
                            class_options(kube, f"{second}-v1"), path)
    first_uid = run_pod(kube, namespace, "early", first_pv)
    wait_for(lambda: reported(kube, first_uid), timeout=TIMEOUT, what="the first pod's volume reported")
    second_uid = run_pod(kube, namespace, "late", second_pv)
    volume = wait_for(lambda: reported(kube, second_uid), timeout=TIMEOUT, what="the second pod's volume reported")
    first_mount = f"/var/lib/kubelet/pods/{first_uid}/volumes/kubernetes.io~nfs/{first_pv}"
    assert "timeo=100" in volume["effectiveOptions"] and volume["sharedWith"] == [first_mount]
    # The kernel's word: both pods' mounts on one superblock (mountinfo's major:minor), with the first one's timeo.
    first_line, second_line = mountinfo_line(real_node, first_uid, first_pv), mountinfo_line(real_node, second_uid,
                                                                                            second_pv)
    assert first_line.split()[2] == second_line.split()[2] == volume["superblock"], (first_line, second_line)
    assert "timeo=100" in second_line.split(" - ")[1].split()[2].split(","), second_line
    status = wait_for(lambda: (c := compliance(kube, second)) and c["volumes"]["drifted"] == 1 and c,
                      timeout=TIMEOUT, what="the second profile drifted")
    assert {o["reason"] for o in status["worstOffenders"]} == {"SuperblockShared"}
    events = wait_for(lambda: [m for r, m in pod_events(kube, namespace, "late") if r == "SuperblockShared"],
                      timeout=TIMEOUT, what="a SuperblockShared Event on the late pod")
    assert first_uid in events[0]
    # The first profile's own timer writes its status: its tick may come just after the second's.
    wait_for(lambda: ((compliance(kube, first) or {}).get("volumes") or {}).get("compliant") == 1, timeout=TIMEOUT,
             what="the first profile's volume compliant")


def test_a_pod_holding_a_sqlite_lock_on_nfs_is_found(real_node, kube, chart, namespace, unique):
    profile = f"sqlite-{unique}"
    kube.apply_profile(profile_body(profile, "cached", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(profile), what="the profile's class")
    pv = make_volume(kube, real_node, namespace, f"pv-db-{unique}", f"{profile}-v1",
                     class_options(kube, f"{profile}-v1"), f"/db-{unique}")
    # sqlite3 holds a RESERVED lock (and its -journal) while .shell sleeps inside the transaction.
    hold = ("printf 'CREATE TABLE IF NOT EXISTS t(x);\\nBEGIN IMMEDIATE;\\nINSERT INTO t VALUES (1);\\n"
            ".shell sleep 100000\\n' | sqlite3 /data/app.db")
    uid = run_pod(kube, namespace, "db", pv, hold)
    mount_point = f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~nfs/{pv}"
    # A scan between sqlite3's open and its BEGIN IMMEDIATE finds the database without the lock: that Event comes
    # first (each distinct message is posted once), the locked one with the next scan.
    events = wait_for(lambda: [m for r, m in pod_events(kube, namespace, "db") if r == "SQLiteOnNFS"
                               and "holds RESERVED" in m], timeout=TIMEOUT, what="a SQLiteOnNFS Event on the pod, locked")
    # The database as the process opened it (its path in the container), on the pod's volume, with its lock.
    assert events[0].startswith(f"{pv} on {NODE_NAME}: SQLite database {DATABASE} in rollback-journal mode on nfs4 "
                                f"{mount_point}: pid "), events
    (found,) = wait_for(lambda: (r := sqlite_reported(kube, uid)) and r, timeout=TIMEOUT, what="the database reported")
    device = mountinfo_line(real_node, uid, pv).split()[2]
    assert (found["path"], found["mode"], found["lock"], found["podUid"], found["volumeName"], found["mountPoint"],
            found["device"]) == (DATABASE, "rollback", "RESERVED", uid, pv, mount_point, device), found
    # The kernel's word: the RESERVED byte (1073741825) locked in /proc/locks, on the superblock of the pod's mount.
    reserved = [line.split() for line in real_node.vm.read_text("/proc/locks").splitlines()
                if line.split()[-2:] == ["1073741825", "1073741825"]]
    on_volume = [fields for fields in reserved if _lock_device(fields) == device]
    assert len(on_volume) == 1 and on_volume[0][1:4] == ["POSIX", "ADVISORY", "WRITE"], (device, reserved)
    assert int(on_volume[0][4]) == found["pid"], (on_volume, found)
    assert wait_for(lambda: (c := compliance(kube, profile)) and c.get("sqliteDatabases") == 1 and c,
                    timeout=TIMEOUT, what="the profile counting the database")


def test_a_multi_replica_rollout_patches_the_pv_and_every_real_remount_is_verified(real_node, kube, chart,
                                                                                   namespace, unique):
    """PatchBoundVolumes with two replicas on the node: the PV is patched, the Deployment restarted, the kubelet
    mounts each new replica with the new options (a superblock of their own: acregmax differs, which the kernel
    compares), the agent sees them, and only then is the rollout Done, with no remount."""
    profile = f"roll-{unique}"
    automatic = {"strategy": "PatchBoundVolumes", "approval": "Automatic"}
    backend = {"provisioner": "nfs.csi.k8s.io"}
    replicas = 2
    kube.apply_profile(profile_body(profile, "cached", backend=backend, rollout=automatic))
    wait_for(lambda: kube.classes_of(profile), what="v1")
    pv = make_volume(kube, real_node, namespace, f"pv-roll-{unique}", f"{profile}-v1",
                     class_options(kube, f"{profile}-v1"), f"/roll-{unique}")
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec(pv, pinned=False)}},
    })
    old = wait_for(lambda: len(pods := running(kube, namespace, "web")) == replicas and pods, timeout=TIMEOUT * 2,
                   interval=2, what="both replicas of web Running")
    wait_for(lambda: all(reported(kube, pod.metadata.uid) for pod in old), timeout=TIMEOUT,
             what="both replicas' volumes reported")
    # Before: both replicas on one superblock, with the cached preset's acregmax.
    assert len({mountinfo_line(real_node, pod.metadata.uid, pv).split()[2] for pod in old}) == 1
    started = time.monotonic()
    kube.apply_profile(profile_body(profile, "staging", backend=backend, rollout=automatic))
    target = f"{profile}-v2"

    def done():
        rollout = ((kube.profile(profile) or {}).get("status") or {}).get("rollout") or {}
        return rollout if rollout.get("phase") == "Complete" and rollout.get("targetStorageClassName") == target \
            else None

    rollout = wait_for(done, timeout=TIMEOUT * 3, interval=2, what=f"the rollout to {target} Complete")
    elapsed = time.monotonic() - started
    (line,) = rollout["workloads"]
    assert (line["state"], line["reason"], line.get("remounts")) == ("Done", "Verified", None), line
    assert kube.core.read_persistent_volume(pv).spec.mount_options == class_options(kube, target)
    pods = running(kube, namespace, "web")
    assert len(pods) == replicas and not {pod.metadata.uid for pod in pods} & {pod.metadata.uid for pod in old}
    for pod in pods:
        volume = reported(kube, pod.metadata.uid)
        assert volume is not None and {"acregmin=0", "acregmax=0", "lookupcache=positive"} <= set(
            volume["effectiveOptions"]), volume
    # The kernel's own word: every new replica's mount has the new options, on one new superblock.
    lines = [mountinfo_line(real_node, pod.metadata.uid, pv) for pod in pods]
    assert all("acregmax=0" in line.split(" - ")[1].split()[2].split(",") for line in lines), lines
    assert len({line.split()[2] for line in lines}) == 1, lines
    print(f"{replicas}-replica Deployment rollout on the real node: {elapsed:.0f} s")


def running(kube, namespace: str, app: str) -> list:
    return [p for p in kube.core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]


def test_a_new_pod_on_a_superblock_kept_alive_by_another_pod_blocks_until_the_mounts_agree(
        real_node, kube, chart, namespace, unique):
    """The rollout's new pod lands on the old superblock (another pod keeps it, and the new options differ
    only in timeo, which the kernel does not compare): the rollout pauses, naming the other consumer. With it
    gone, the replica's own replaced pod (unmounting after its successor mounted) keeps the superblock on a
    real kubelet: the rollout stays blocked and says how to let the last mount go; once the workload's pods
    leave the node and come back, the real mounts agree and only then is it Complete."""
    profile = f"held-{unique}"
    automatic = {"strategy": "PatchBoundVolumes", "approval": "Automatic"}
    body = options_profile(profile, ["vers=4.1", "timeo=100"])
    body["spec"]["rollout"] = automatic
    kube.apply_profile(body)
    wait_for(lambda: kube.classes_of(profile), what="v1")
    path = f"/held-{unique}"
    v1_options = class_options(kube, f"{profile}-v1")
    # Another consumer of the same export on the node, through a PV no profile governs.
    other = make_volume(kube, real_node, namespace, f"pv-other-{unique}", "", v1_options, path)
    other_uid = run_pod(kube, namespace, "other", other)
    wait_for(lambda: reported(kube, other_uid), timeout=TIMEOUT, what="the other consumer reported")
    pv = make_volume(kube, real_node, namespace, f"pv-app-{unique}", f"{profile}-v1", v1_options, path)
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "app"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                 "template": {"metadata": {"labels": {"app": "app"}}, "spec": pod_spec(pv, pinned=False)}},
    })
    wait_for(lambda: running_app(kube, namespace), timeout=TIMEOUT, what="app Running")

    body = options_profile(profile, ["vers=4.1", "timeo=600"])
    body["spec"]["rollout"] = automatic
    kube.apply_profile(body)
    target = f"{profile}-v2"

    def rollout():
        return ((kube.profile(profile) or {}).get("status") or {}).get("rollout") or {}

    paused = wait_for(lambda: (r := rollout()).get("phase") == "Paused" and r.get("targetStorageClassName") == target
                      and r, timeout=TIMEOUT * 2, interval=2, what="the rollout Paused on the shared superblock")
    (line,) = paused["workloads"]
    assert (line["state"], line["reason"]) == ("Blocked", "SuperblockShared")
    assert f"pod {namespace}/other" in line["message"]
    app = running_app(kube, namespace)
    # The kernel's word: the new pod's mount runs with the surviving superblock's timeo.
    assert "timeo=100" in mountinfo_line(real_node, app.metadata.uid, pv)

    kube.core.delete_namespaced_pod("other", namespace, grace_period_seconds=0)
    settled = wait_for(lambda: (r := rollout()).get("phase") == "Complete" and r
                       or (r.get("workloads") or [{}])[0].get("reason") == "RemountsExhausted" and r,
                       timeout=TIMEOUT * 2, interval=2, what="the rollout Complete, or its remounts exhausted")
    if settled["phase"] != "Complete":
        # The replaced replica unmounted after its successor mounted: the kernel kept the superblock.
        (line,) = settled["workloads"]
        assert "differ from it only in timeo" in line["message"] and "scale the workload to zero" in line["message"]
        kube.apps.patch_namespaced_deployment_scale("app", namespace, {"spec": {"replicas": 0}})
        wait_for(lambda: f"volumes/kubernetes.io~nfs/{pv}" not in real_node.vm.read_text("/proc/1/mountinfo"),
                 timeout=TIMEOUT, interval=2, what="the last mount of the export gone from the node")
        kube.apps.patch_namespaced_deployment_scale("app", namespace, {"spec": {"replicas": 1}})
        settled = wait_for(lambda: (r := rollout()).get("phase") == "Complete" and r, timeout=TIMEOUT * 2,
                           interval=2, what="the rollout Complete once the mounts agree")
    (line,) = settled["workloads"]
    assert line["state"] == "Done"
    app = running_app(kube, namespace)
    assert "timeo=600" in mountinfo_line(real_node, app.metadata.uid, pv)


def running_app(kube, namespace: str):
    pods = [p for p in kube.core.list_namespaced_pod(namespace, label_selector="app=app").items
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
    return pods[0] if len(pods) == 1 else None


def mountinfo_line(real_node, pod_uid: str, pv: str) -> str:
    mount_point = f"/var/lib/kubelet/pods/{pod_uid}/volumes/kubernetes.io~nfs/{pv}"
    return next(line for line in real_node.vm.read_text("/proc/1/mountinfo").splitlines() if mount_point in line)
