"""One scan of an assembled proc root into the NodeMountReport spec the agent writes."""

import json
import os
import threading
from datetime import UTC, datetime

import pytest
from tests.procroot import KRB5P_WRAPPED, Mount, assemble_proc_root, pod_uid, scaled_mounts

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent import probe as probe_module
from mountwarden.agent import scan as scan_module
from mountwarden.agent.probe import ServerProbe
from mountwarden.agent.scan import (
    MAX_REPORTED_OPERATIONS,
    ScanError,
    kubelet_roots,
    resolve_on_host,
    scan_node_report,
)
from mountwarden.api.nodemountreport import NodeMountReportSpec, SqliteDatabase

ROOT = "/var/lib/kubelet"
INT64_MAX = 2**63 - 1


def report(path, **kwargs):
    options = {"node_name": "node-1", "kubelet_root": ROOT, "network_fstypes": ("nfs", "nfs4"), **kwargs}
    return scan_node_report(ProcRoot(path), **options)


def integers(value):
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from integers(item)
    elif isinstance(value, list):
        for item in value:
            yield from integers(item)


def test_the_report_names_every_volume_with_its_pod(tmp_path):
    mounts = [Mount("pv-a", pod_uid=pod_uid("a"), superblock="s", sample_mount="/D"),
              Mount("pv-a", pod_uid=pod_uid("b"), superblock="s"),
              Mount("scratch", pod_uid=pod_uid("c"), plugin="nfs", sample_mount="/C")]
    assembled = assemble_proc_root(tmp_path, mounts)
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    result = report(assembled.path, now=now)

    spec = result.spec
    assert (spec.node_name, spec.scan_time, spec.network_fstypes) == ("node-1", now, ["nfs", "nfs4"])
    assert sorted((v.pod_uid, v.volume_name, v.plugin) for v in spec.volumes) == sorted(
        (m.pod_uid, m.volume, m.plugin) for m in mounts)
    wire = spec.to_wire()
    first = next(v for v in wire["volumes"] if v["podUid"] == pod_uid("a"))
    assert first["sharedWith"] == [assembled.mount_point(mounts[1])]
    assert first["optionsSource"] == "mountstats" and "vers=4.2" in first["effectiveOptions"]
    # The wire form is what the CRD accepts: it validates back into the model.
    assert NodeMountReportSpec.model_validate(wire) == spec


def test_the_scan_accounts_for_its_time_and_a_dead_servers_probe_is_its_one_wait(tmp_path, monkeypatch):
    server_back = threading.Event()
    monkeypatch.setattr(probe_module, "statvfs", lambda *paths: server_back.wait())  # a hard mount, server gone
    mounts = [Mount("pv-a", pod_uid=pod_uid("a"), superblock="s"), Mount("pv-b", pod_uid=pod_uid("b"), superblock="t")]
    proc = ProcRoot(assemble_proc_root(tmp_path, mounts).path)
    try:
        result, again = (scan_node_report(proc, node_name="node-1", kubelet_root=ROOT, network_fstypes=("nfs",),
                                          probe=ServerProbe(proc, timeout=0.5)) for _ in range(2))
    finally:
        server_back.set()
    # Both superblocks' probes were waited for together: one timeout, not two (two in turn would be 1 s at least:
    # Event.wait never returns early). The next scan finds them still stuck and waits for nothing.
    assert 0.5 <= result.waited_seconds < 1.0 and again.waited_seconds == 0.0, (result.account(), again.account())
    assert result.cpu_seconds > 0 and result.paused_seconds == 0.0  # no tracker: no pauses between samples
    assert f"{result.waited_seconds:.3f} s waiting for servers that did not answer" in result.account()


def test_at_most_the_busiest_operations_are_reported(tmp_path):
    # /D (NFSv4.2) has more than ten operations that ran.
    assembled = assemble_proc_root(tmp_path, [Mount("pv-d", pod_uid=pod_uid("d"), sample_mount="/D")])

    result = report(assembled.path)

    (scanned,) = result.scan.volumes
    (reported,) = result.spec.volumes
    assert len(scanned.operations) > MAX_REPORTED_OPERATIONS
    assert list(reported.operations) == list(scanned.operations)[:MAX_REPORTED_OPERATIONS]


def test_no_wrapped_counter_reaches_the_report(tmp_path):
    assembled = assemble_proc_root(tmp_path, [Mount("home", pod_uid=pod_uid("h"))], sample=KRB5P_WRAPPED)

    wire = report(assembled.path).spec.to_wire()

    assert max(integers(wire)) <= INT64_MAX
    access = wire["volumes"][0]["operations"]["ACCESS"]
    assert "avgQueueMs" not in access and access["avgRttMs"] > 0


def test_an_unreadable_proc_root_is_a_failed_scan_not_an_empty_report(tmp_path):
    with pytest.raises(ScanError, match="mountinfo"):
        report(tmp_path)


def test_the_sqlite_seam_gets_the_network_mounts_and_its_findings_are_reported(tmp_path):
    mount = Mount("pv-db", pod_uid=pod_uid("db"), sample_mount="/C")
    assembled = assemble_proc_root(tmp_path, [mount, Mount("/mnt/other", plugin="host", sample_mount="/A")])
    seen = []

    def sqlite_scan(proc, network_mounts):
        seen.extend(network_mounts)
        return [SqliteDatabase(severity="warning", mode="rollback", device=network_mounts[0].superblock, inode=42,
                              pod_uid=network_mounts[0].kubelet.pod_uid, message="in use", remedy="move it")]

    spec = report(assembled.path, sqlite_scan=sqlite_scan).spec

    assert [m.mount_point for m in seen] == [assembled.mount_point(mount), "/mnt/other"]
    (finding,) = spec.sqlite
    assert (finding.pod_uid, finding.device) == (pod_uid("db"), assembled.superblocks[assembled.mount_point(mount)])


def test_a_kubelet_root_that_is_a_symlink_on_the_host_is_followed(tmp_path):
    host = tmp_path / "1" / "root"
    (host / "data" / "kubelet").mkdir(parents=True)
    (host / "var" / "lib").mkdir(parents=True)
    os.symlink("/data/kubelet", host / "var" / "lib" / "kubelet")
    assembled = assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=pod_uid("a"))], kubelet_root="/data/kubelet")

    assert kubelet_roots(ProcRoot(tmp_path), ROOT) == [ROOT, "/data/kubelet"]
    (volume,) = report(assembled.path).spec.volumes
    assert volume.mount_point.startswith("/data/kubelet/")


def test_relative_and_chained_links_resolve_within_the_host_root(tmp_path):
    host = tmp_path / "1" / "root"
    (host / "srv" / "k8s").mkdir(parents=True)
    (host / "var" / "lib").mkdir(parents=True)
    os.symlink("../../srv/link", host / "var" / "lib" / "kubelet")
    os.symlink("k8s", host / "srv" / "link")

    assert resolve_on_host(ProcRoot(tmp_path), "/var/lib/kubelet/") == "/srv/k8s"


def test_a_symlink_loop_or_no_host_root_leaves_the_path_as_given(tmp_path):
    assert resolve_on_host(ProcRoot(tmp_path), ROOT) == ROOT
    host = tmp_path / "1" / "root" / "var" / "lib"
    host.mkdir(parents=True)
    os.symlink("/var/lib/kubelet", host / "kubelet")

    assert resolve_on_host(ProcRoot(tmp_path), ROOT) == ROOT


def test_a_report_too_big_for_etcd_leaves_the_operation_totals_out(tmp_path, monkeypatch):
    assembled = assemble_proc_root(tmp_path, scaled_mounts(40))
    full = report(assembled.path).spec
    assert all(volume.operations for volume in full.volumes)
    monkeypatch.setattr(scan_module, "MAX_REPORT_BYTES", len(json.dumps(full.to_wire())) - 1)

    trimmed = report(assembled.path).spec

    assert len(trimmed.volumes) == 40 and not any(volume.operations for volume in trimmed.volumes)
    assert [v.effective_options for v in trimmed.volumes] == [v.effective_options for v in full.volumes]
