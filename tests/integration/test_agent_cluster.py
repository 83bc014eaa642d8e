"""`mountwarden agent` against a real API server: pods on kwok nodes, a proc root carrying their UIDs.

The agent runs as users run it (a separate process, --once), so that a second run
has only the stored report to remember the first by: it must write nothing when
nothing changed.
"""

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
from tests.procroot import Mount, assemble_proc_root, pod_uid
from tests.support import GROUP, VERSION, wait_for

from mountwarden.agent.pods import NodePods
from mountwarden.agent.report import ReportWriter, WriteOutcome
from mountwarden.api.nodemountreport import NodeMountReportSpec

pytestmark = pytest.mark.cluster
PLURAL = "nodemountreports"


def read_report(kube, node):
    try:
        return kube.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def delete_report(kube, node):
    try:
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
    wait_for(lambda: read_report(kube, node) is None, timeout=30, what=f"the report of {node} to go")


def run_agent(cluster, proc_root, node, *extra):
    command = [sys.executable, "-m", "mountwarden", "agent", "--once", "--node-name", node,
               "--proc-root", str(proc_root), "--kubeconfig", str(cluster.kubeconfig), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def running_pods(kube, namespace, node, names):
    """Pods bound to a kwok node, as the scheduler would bind them; kwok makes them Running."""
    for name in names:
        kube.core.create_namespaced_pod(namespace, {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
        })

    def uids():
        pods = {pod.metadata.name: pod for pod in kube.core.list_namespaced_pod(namespace).items}
        ready = all(name in pods and pods[name].status.phase == "Running" for name in names)
        return ready and {name: pods[name].metadata.uid for name in names}

    return wait_for(uids, timeout=60, what=f"pods {names} Running on {node}")


def set_boot_id(cluster, node, boot_id):
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=merge",
                    "-p", f'{{"status": {{"nodeInfo": {{"bootID": "{boot_id}"}}}}}}')


def test_agent_reports_the_nodes_pod_volumes_and_writes_only_on_change(cluster, kube, crds_installed, namespace,
                                                                       tmp_path):
    node = cluster.node_names[0]
    delete_report(kube, node)
    uids = running_pods(kube, namespace, node, ["importer", "uploader", "legacy"])
    mounts = [
        Mount("pv-shared", pod_uid=uids["importer"], superblock="shared", sample_mount="/D"),
        Mount("pv-shared", pod_uid=uids["uploader"], superblock="shared"),
        Mount("nas", pod_uid=uids["legacy"], plugin="nfs", sample_mount="/C"),
    ]
    assembled = assemble_proc_root(tmp_path / "proc", mounts)

    first = run_agent(cluster, assembled.path, node)

    assert first.returncode == 0, first.stderr
    report = read_report(kube, node)
    spec = report["spec"]
    assert spec["nodeName"] == node
    volumes = {volume["podUid"]: volume for volume in spec["volumes"]}
    assert set(volumes) == set(uids.values())
    importer, uploader = volumes[uids["importer"]], volumes[uids["uploader"]]
    assert importer["superblock"] == uploader["superblock"] == assembled.superblocks[assembled.mount_point(mounts[0])]
    assert importer["sharedWith"] == [assembled.mount_point(mounts[1])]
    assert volumes[uids["legacy"]]["plugin"] == "nfs" and volumes[uids["legacy"]]["sharedWith"] == []
    assert "vers=4.2" in importer["effectiveOptions"] and importer["optionsSource"] == "mountstats"
    assert importer["operations"] and len(importer["operations"]) <= 10
    node_uid = kube.core.read_node(node).metadata.uid
    assert report["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    written = report["metadata"]["resourceVersion"]

    # Nothing changed: the second agent compares with the stored report and writes nothing.
    second = run_agent(cluster, assembled.path, node)
    assert second.returncode == 0, second.stderr
    assert read_report(kube, node)["metadata"]["resourceVersion"] == written
    assert "report unchanged" in second.stderr

    # Counters moved, nothing else: still no write.
    stats = assembled.path / "1" / "mountstats"
    grown = stats.read_text().replace("GETATTR: 145712 145712 0 22994472 16319744 532 107480 109969",
                                      "GETATTR: 150000 150000 0 23994472 17319744 540 110000 112000")
    assert grown != stats.read_text()
    stats.write_text(grown)
    assert run_agent(cluster, assembled.path, node).returncode == 0
    assert read_report(kube, node)["metadata"]["resourceVersion"] == written

    # Another mount: written.
    mounts.append(Mount("pv-scratch", pod_uid=uids["legacy"], sample_mount="/B"))
    assemble_proc_root(tmp_path / "proc", mounts)
    third = run_agent(cluster, assembled.path, node)
    assert third.returncode == 0, third.stderr
    report = read_report(kube, node)
    assert report["metadata"]["resourceVersion"] != written
    assert {v["volumeName"] for v in report["spec"]["volumes"]} == {"pv-shared", "nas", "pv-scratch"}
    assert "report updated" in third.stderr

    # Unchanged but older than the heartbeat: rewritten with fresh counters and scan time.
    written = report["metadata"]["resourceVersion"]
    wait_for(lambda: datetime.now(UTC) - datetime.fromisoformat(report["spec"]["scanTime"]) > timedelta(seconds=1.5),
             timeout=10, what="the report to age past the heartbeat")
    heartbeat = run_agent(cluster, assembled.path, node, "--heartbeat", "1")
    assert heartbeat.returncode == 0, heartbeat.stderr
    assert read_report(kube, node)["metadata"]["resourceVersion"] != written
    assert "report heartbeat" in heartbeat.stderr


def test_agent_refuses_to_write_another_nodes_report(cluster, kube, crds_installed, tmp_path):
    this_node, other_node = cluster.node_names[1], cluster.node_names[2]
    assembled = assemble_proc_root(tmp_path / "proc", [Mount("pv-a", pod_uid=pod_uid("refusal"))],
                                   boot_id="boot-of-this-host")
    delete_report(kube, other_node)

    missing = run_agent(cluster, assembled.path, "no-such-node")
    assert missing.returncode == 2, missing.stderr
    assert "there is no node named 'no-such-node'" in missing.stderr
    assert read_report(kube, "no-such-node") is None

    set_boot_id(cluster, other_node, "boot-of-another-host")
    set_boot_id(cluster, this_node, "boot-of-this-host")
    try:
        wait_for(lambda: kube.core.read_node(other_node).status.node_info.boot_id == "boot-of-another-host",
                 timeout=30, what="the boot ID to be stored")
        refused = run_agent(cluster, assembled.path, other_node)
        assert refused.returncode == 2, refused.stderr
        assert "does not run on" in refused.stderr
        assert read_report(kube, other_node) is None

        # The same proc root on its own node is fine.
        allowed = run_agent(cluster, assembled.path, this_node)
        assert allowed.returncode == 0, allowed.stderr
        assert read_report(kube, this_node)["spec"]["nodeName"] == this_node
    finally:
        set_boot_id(cluster, other_node, "")
        set_boot_id(cluster, this_node, "")


def spec_for(node, *, options):
    return NodeMountReportSpec.model_validate({
        "nodeName": node, "scanTime": datetime.now(UTC).isoformat(), "agentVersion": "test",
        "networkFstypes": ["nfs4"],
        "volumes": [{"podUid": "uid-1", "volumeName": "pv-a", "plugin": "csi", "mountPoint": "/m",
                     "fstype": "nfs4", "source": "fs:/", "superblock": "0:101", "effectiveOptions": options,
                     "optionsSource": "mountstats"}],
    })


def test_writer_rereads_on_conflict_and_recreates_a_deleted_report(cluster, kube, crds_installed):
    node = cluster.node_names[2]
    delete_report(kube, node)
    writer = ReportWriter(cluster.api_client(), node)

    assert writer.sync(spec_for(node, options=["vers=4.1"])) is WriteOutcome.CREATED
    assert writer.sync(spec_for(node, options=["vers=4.1"])) is WriteOutcome.UNCHANGED

    # Someone else changes the object: the writer's copy is stale, its replace gets 409 and reads again.
    cluster.kubectl("annotate", f"{PLURAL}.{GROUP}", node, "example.com/owner=team-storage")
    assert writer.sync(spec_for(node, options=["vers=4.2"])) is WriteOutcome.UPDATED
    stored = read_report(kube, node)
    assert stored["spec"]["volumes"][0]["effectiveOptions"] == ["vers=4.2"]
    assert stored["metadata"]["annotations"]["example.com/owner"] == "team-storage"

    # Deleted under it: the replace gets 404, and the report is created again.
    delete_report(kube, node)
    assert writer.sync(spec_for(node, options=["vers=4.1"])) is WriteOutcome.CREATED
    assert read_report(kube, node)["spec"]["volumes"][0]["effectiveOptions"] == ["vers=4.1"]


def test_the_node_pods_follower_resumes_from_bookmarks_and_never_lists_again(cluster, kube, namespace):
    """A quiet node in a busy cluster: its agent's watch sees no event, and the API server sends it bookmarks instead,
    2 s before each watch request's end, once pods elsewhere moved the version on (apiserver's cacher,
    cache_watcher.go nextBookmarkTime). The agent resumes from them, where it once relisted on every one."""
    quiet, busy = cluster.node_names[:2]
    running_pods(kube, namespace, busy, ["elsewhere"])
    changed: list[str] = []
    follower = NodePods(kube.client, quiet, on_change=changed.append, watch_seconds=5)
    follower.start()
    try:
        wait_for(follower.synced.is_set, timeout=60, what="the first listing of the node's pods")
        ended = follower.watches_ended

        def bookmarked() -> bool:
            # Another node's pod changes: an event the follower's field selector leaves out, so a bookmark follows.
            kube.core.patch_namespaced_pod("elsewhere", namespace, {"metadata": {"labels": {"tick": str(time.time_ns())}}})
            return follower.bookmarks >= 1 and follower.watches_ended >= ended + 2

        wait_for(bookmarked, timeout=60, interval=1,
                 what=lambda: f"two more watch requests ended, a bookmark among them (ended {follower.watches_ended}, "
                              f"bookmarks {follower.bookmarks}, lists {follower.lists})")
        created = kube.core.create_namespaced_pod(namespace, {
            "metadata": {"name": "writer"},
            "spec": {"nodeName": quiet, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
        })
        pod = wait_for(lambda: follower.get(created.metadata.uid), timeout=30, what="the new pod, through the watch")
        assert pod.claims == {"data": "data"} and created.metadata.uid in changed
        assert follower.lists == 1
    finally:
        follower.stop()
