"""The agent on a live kernel, its report judged by the operator on the local control plane.

Two profiles make StorageClasses; pods run on a kwok node. In the lab VM the export is
mounted where the kubelet would mount those pods' volumes, with the classes' own
mountOptions: the CSI layout (a staging mount under plugins/kubernetes.io/csi and a bind
mount into the pod) for an EFS profile, the in-tree `kubernetes.io~nfs/<pv>` layout for a
generic NFS profile, one of them mounted by an older version of its class (without the
options declared now). A process in the first pod's cgroup holds a SQLite lock on its volume.
`mountwarden agent --once --dry-run` scans the VM's live /proc; its report comes back through
the 9p share, is written to the API server as that node's NodeMountReport, and the operator's
compliance, conditions and Events must say what the kernel really has.
"""

import hashlib
import json
import time

import kubernetes
import pytest
from tests.integration.test_compliance import compliance, pod_events, pod_with, volume_for
from tests.kernel.test_sqlite import HOLDER
from tests.support import profile_body, wait_for

from mountwarden.lab.vm import GUEST_IO

pytestmark = pytest.mark.cluster

KUBELET = "/var/lib/kubelet"


def class_mount_options(kube, name: str) -> str:
    return ",".join(kube.storage.read_storage_class(name).mount_options or [])


def write_report(api_client, report: dict) -> None:
    custom = kubernetes.client.CustomObjectsApi(api_client)
    name = report["metadata"]["name"]
    try:
        custom.create_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", report)
    except kubernetes.client.ApiException as error:
        if error.status != 409:
            raise
        custom.patch_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", name,
                                           {"spec": report["spec"]})


def test_a_report_from_the_live_kernel_reaches_status_and_events(cluster, kube, operator, namespace, unique, lab,
                                                                  request):
    node = cluster.node_names[2]
    efs_profile, nfs_profile = f"efs-{unique}", f"nfs-{unique}"
    kube.apply_profile(profile_body(efs_profile, "cached"))
    kube.apply_profile(profile_body(nfs_profile, "staging", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(efs_profile) and kube.classes_of(nfs_profile), what="both classes")
    efs_class, nfs_class = f"{efs_profile}-v1", f"{nfs_profile}-v1"
    efs_pv, nfs_pv = f"pv-efs-{unique}", f"pv-nfs-{unique}"
    volume_for(kube, namespace, efs_pv, efs_class,
               {"csi": {"driver": "efs.csi.aws.com", "volumeHandle": f"fs-0123456789abcdef0::{efs_pv}"}})
    volume_for(kube, namespace, nfs_pv, nfs_class)
    uids = {"importer": pod_with(kube, namespace, node, "importer", efs_pv),
            "uploads": pod_with(kube, namespace, node, "uploads", nfs_pv)}

    # The EFS class's options, in the CSI layout: staging once per volume, a bind mount per pod.
    handle_hash = hashlib.sha256(f"fs-0123456789abcdef0::{efs_pv}".encode()).hexdigest()
    staging = f"{KUBELET}/plugins/kubernetes.io/csi/efs.csi.aws.com/{handle_hash}/globalmount"
    lab.mount(class_mount_options(kube, efs_class), at=staging)
    published = f"{KUBELET}/pods/{uids['importer']}/volumes/kubernetes.io~csi/{efs_pv}/mount"
    lab.bind(staging, published)
    # The generic NFS pod's volume was mounted before the class declared its preset: the defaults.
    lab.mount("vers=4.1,hard", at=f"{KUBELET}/pods/{uids['uploads']}/volumes/kubernetes.io~nfs/{nfs_pv}")

    # A process of the importer pod (the kubelet's systemd cgroup layout) holding a SQLite lock there.
    scope = (f"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
             f"{uids['importer'].replace('-', '_')}.slice/cri-containerd-{'c' * 64}.scope")
    databases = f"{published}/importer"
    lab.vm.run(f"mkdir -p {scope} && sh -c 'echo $$ > {scope}/cgroup.procs && exec python3 -c \"$0\" {databases}' "
               f"'{HOLDER}' > /tmp/holder.log 2>&1 &")
    request.addfinalizer(lambda: lab.vm.run(f"pkill -f ' {databases}$'", check=False))
    deadline = time.monotonic() + 180
    while "holding" not in lab.vm.run("cat /tmp/holder.log", check=False).stdout:
        assert time.monotonic() < deadline, lab.vm.run("cat /tmp/holder.log", check=False).stdout
        time.sleep(1)

    lab.vm.mountwarden("agent", "--once", "--dry-run", "--node-name", node, "--proc-root", "/proc",
                       timeout=600)  # warms the guest's imports; the next run writes the report
    lab.vm.run(f"PYTHONPATH=/mnt/lab-deps:/mnt/lab-code python3 -m mountwarden agent --once --dry-run "
               f"--node-name {node} --proc-root /proc > {GUEST_IO}/report.json", timeout=600)
    report = json.loads((lab.vm.io_dir / "report.json").read_text())
    assert {v["mountPoint"] for v in report["spec"]["volumes"]} >= {staging, published}
    write_report(kube.client, report)

    efs_status = wait_for(lambda: (c := compliance(kube, efs_profile)) and c["volumes"]["compliant"] >= 1 and c,
                          timeout=90, what="the EFS profile's volume compliant")
    assert efs_status["volumes"]["drifted"] == 0
    assert efs_status["sqliteDatabases"] == 2  # rollback.db and wal.db
    assert kube.condition(efs_profile, "Compliant")["status"] == "True"

    drifted = wait_for(lambda: (c := compliance(kube, nfs_profile)) and c["volumes"]["drifted"] == 1 and c,
                       timeout=90, what="the generic NFS profile's volume drifted")
    assert {o["reason"] for o in drifted["worstOffenders"]} == {"OptionMismatch"}
    condition = kube.condition(nfs_profile, "Compliant")
    assert (condition["status"], condition["reason"]) == ("False", "Drifted")
    # The staging preset's attribute and lookup caching, which the old mount does not have.
    assert any(option in condition["message"] for option in ("acregmin", "acregmax", "lookupcache")), condition

    wait_for(lambda: "MountPolicyDrift" in {r for r, _ in pod_events(kube, namespace, "uploads")},
             what="a MountPolicyDrift event on the uploads pod")
    # One Event per database, naming its path, its journal mode and the pod's volume it is on.
    expected = {f"{efs_pv} on {node}: SQLite database {databases}/wal.db in WAL mode on nfs4 {published}: pid ",
                f"{efs_pv} on {node}: SQLite database {databases}/rollback.db in rollback-journal mode on nfs4 "
                f"{published}: pid "}
    sqlite = wait_for(lambda: len(found := [m for r, m in pod_events(kube, namespace, "importer")
                                            if r == "SQLiteOnNFS"]) == 2 and found,
                      what="a SQLiteOnNFS event per database on the importer pod")
    assert {next((start for start in expected if message.startswith(start)), message) for message in sqlite} == (
        expected), sqlite
