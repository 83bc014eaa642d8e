"""How a profile's volumes load their servers across the cluster, and what is drift and what is not."""

from datetime import UTC, datetime, timedelta

from tests.support import read_report

from mountwarden.api.nodemountreport import MountActivity, MountedVolume, ProcessStates
from mountwarden.api.storageprofile import ServerLoad
from mountwarden.core.compliance import Consumer, Contract, VolumeState, assess
from mountwarden.core.node.activity import GBIT, Thresholds
from mountwarden.core.node.report import NodeReport
from mountwarden.core.policy import resolve_policy
from mountwarden.core.serverload import SERVER_NAME_MAX, SERVERS_MAX, MountLoad, mount_loads, server_load

NOW = datetime(2026, 3, 1, tzinfo=UTC)
#: As the kernel shows a v3 gateway mount: nolock with local_lock=all (kernel lab, kernel_facts.json "locking").
MOUNT = ("rw,vers=3,rsize=1048576,wsize=1048576,hard,nolock,proto=tcp,port=2049,mountport=20048,sec=sys,"
         "local_lock=all")


def reported(pod: str, gateway: str, read_gbps: float, *, stuck: float = 0.0) -> MountedVolume:
    return MountedVolume(
        pod_uid=pod, volume_name=f"pv-{pod}", plugin="csi",
        mount_point=f"/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/pv-{pod}/mount", fstype="nfs",
        source=f"{gateway}:/bucket", server=gateway, export="/bucket", superblock="0:101",
        effective_options=MOUNT.split(","), options_source="mountstats", connections=1,
        activity=MountActivity(window_seconds=300, since="scans", read_bytes_per_second=read_gbps * GBIT,
                               write_bytes_per_second=0, requests_per_second=10, retransmissions_per_second=0,
                               major_timeouts_per_second=0, reconnects_per_second=0, connections=1,
                               data_requests=3000, avg_queue_ms=0.5, avg_rtt_ms=1.0, avg_execute_ms=1.6),
        processes=ProcessStates(samples=40, uninterruptible=int(40 * stuck), processes=2,
                                uninterruptible_share=stuck))


def node_report(node: str, volumes: list[MountedVolume]) -> NodeReport:
    """The report as the agent writes it and the operator reads it."""
    return read_report(node, scanTime=NOW.isoformat(), volumes=[
        volume.model_dump(mode="json", by_alias=True, exclude_none=True) for volume in volumes])


def cluster():
    consumers = [Consumer(f"uid-{n}", "data", f"reader-{n}", f"node-{n % 3}", f"pv-uid-{n}") for n in range(6)]
    reports = {}
    for node in ("node-0", "node-1", "node-2"):
        volumes = []
        for consumer in consumers:
            if consumer.node == node:
                gateway = "10.0.9.9" if consumer.pod_name != "reader-5" else "10.0.9.10"
                volumes.append(reported(consumer.pod_uid, gateway, 0.4))
        reports[node] = node_report(node, volumes)
    return consumers, reports


def test_a_gateway_is_shown_as_the_funnel_it_is():
    consumers, reports = cluster()
    rows = server_load(mount_loads(consumers, reports), kind="nfsv3-gateway")
    first, second = rows
    assert (first["server"], first["mounts"], first["nodes"]) == ("10.0.9.9", 5, 3)
    assert first["readBytesPerSecond"] == 5 * 0.4 * GBIT
    assert "5 mount(s) on 3 node(s) share this gateway's network interface: 2.00 Gbit/s together" in first["message"]
    assert (second["server"], second["mounts"]) == ("10.0.9.10", 1)


def test_a_gateway_for_data_each_node_reads_alone_is_told_to_mount_the_backing_store_per_node():
    consumers, reports = cluster()  # each reader mounts a volume of its own
    first = server_load(mount_loads(consumers, reports), kind="nfsv3-gateway")[0]
    assert "data each node reads by itself does not need a gateway (the gateway study's rule)" in first["message"]


def test_a_gateway_for_data_many_nodes_share_is_what_it_is_for():
    consumers = [Consumer(f"uid-{n}", "data", f"reader-{n}", f"node-{n % 3}", "pv-shared") for n in range(6)]
    reports = {node: node_report(node, [reported(c.pod_uid, "10.0.9.9", 0.4).model_copy(update={
        "volume_name": "pv-shared"}) for c in consumers if c.node == node]) for node in ("node-0", "node-1", "node-2")}
    (row,) = server_load(mount_loads(consumers, reports), kind="nfsv3-gateway")
    assert (row["mounts"], row["nodes"]) == (6, 3)
    assert "Up to 3 nodes read the same volume through it: data many nodes share is what a gateway is for" in row[
        "message"]


def test_other_kinds_get_the_figures_without_the_funnel_message():
    consumers, reports = cluster()
    assert all(row["message"] == "" for row in server_load(mount_loads(consumers, reports), kind="nfs"))


def test_stuck_processes_are_reported_but_never_make_a_volume_drifted():
    options = resolve_policy(provisioner="nfs.csi.k8s.io", cache_policy="read-only",
                             mount_options=["vers=3", "port=2049", "mountport=20048", "nolock"],
                             kind="nfsv3-gateway").options
    consumer = Consumer("uid-0", "data", "reader-0", "node-0", "pv-uid-0")
    mount = MOUNT.replace("rw,", "ro,") + ",acregmin=600,acregmax=600,acdirmin=600,acdirmax=600,nocto"
    volume = reported("uid-0", "10.0.9.9", 0.1, stuck=0.95).model_copy(update={"effective_options": mount.split(",")})
    view = node_report("node-0", [volume])
    verdict = assess(consumer, Contract(options, thresholds=Thresholds(), kind="nfsv3-gateway"), {"node-0": view},
                     now=NOW, stale_after=timedelta(minutes=15))
    assert verdict.state is VolumeState.COMPLIANT, verdict
    assert [f.reason for f in verdict.findings] == ["StuckOnNFS"]


def test_a_server_name_and_the_number_of_servers_are_bounded_in_status():
    huge = "s" * (1 << 20)
    loads = [MountLoad(huge, "node-0", "pv-0", 1.0, 0.0)] + [
        MountLoad(f"10.0.0.{n}", "node-0", f"pv-{n}", 0.0, 0.0) for n in range(2 * SERVERS_MAX)]
    rows = server_load(loads, kind="nfs")
    assert len(rows) == SERVERS_MAX
    assert len(rows[0]["server"]) == SERVER_NAME_MAX and rows[0]["server"].endswith("...")
    ServerLoad.model_validate(rows[0])  # what status.servers holds passes the status schema
