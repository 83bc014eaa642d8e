"""The node's pod volumes from real mountstats samples, and the check of one volume against its contract."""

import pytest
from tests.procroot import (
    KRB5P_WRAPPED,
    RDMA_NCONNECT,
    Mount,
    assemble_proc_root,
    pod_uid,
    sample_path,
)
from tests.support import read_report

from mountwarden.api.nodemountreport import MountedVolume
from mountwarden.core.findings import Reason
from mountwarden.core.node.check import check_volume
from mountwarden.core.node.report import ReportedMount
from mountwarden.core.node.scan import (
    NodeVolume,
    OptionsSource,
    pair_mountstats,
    scan_node,
    split_source,
)
from mountwarden.core.options.normalize import Severity
from mountwarden.core.policy import resolve_policy
from mountwarden.core.procfs import parse_mountinfo, parse_mountstats
from mountwarden.core.procfs.mountstats import WRAPPED_COUNTER_FLOOR

ROOT = "/var/lib/kubelet"
A, B, C = pod_uid("a"), pod_uid("b"), pod_uid("c")


def scan_dir(directory, *, kubelet_roots=(ROOT,), network_fstypes=("nfs", "nfs4")):
    mountinfo = parse_mountinfo((directory / "1" / "mountinfo").read_text())
    mountstats = parse_mountstats((directory / "1" / "mountstats").read_text())
    return scan_node(mountinfo, mountstats, kubelet_roots=kubelet_roots, network_fstypes=network_fstypes)


def by_mount_point(scan):
    return {volume.mount_point: volume for volume in scan.volumes}


@pytest.fixture
def node(tmp_path):
    """Two pods on one superblock of /D (NFSv4.2), one in-tree nfs volume of /A, a staging mount of /B,
    a subPath bind of pod a's volume and a host mount on /D's server."""
    mounts = [
        Mount("pv-shared", pod_uid=A, superblock="shared", sample_mount="/D"),
        Mount("pv-shared", pod_uid=B, superblock="shared"),
        Mount("data", pod_uid=C, plugin="nfs", sample_mount="/A"),
        Mount("pv-staged", plugin="csi-staging", sample_mount="/B"),
        Mount("pv-shared", pod_uid=A, plugin="subpath", superblock="shared"),
        Mount("/mnt/backup", plugin="host", sample_mount="/D"),
    ]
    return assemble_proc_root(tmp_path, mounts), mounts


def test_every_pod_volume_is_found_with_its_pod_and_plugin(node):
    assembled, mounts = node
    volumes = by_mount_point(scan_dir(assembled.path))

    expected = {assembled.mount_point(m): m for m in mounts if m.plugin in ("csi", "nfs", "csi-staging")}
    assert set(volumes) == set(expected)
    for mount_point, mount in expected.items():
        volume = volumes[mount_point]
        assert (volume.pod_uid, volume.plugin) == (mount.pod_uid, mount.plugin)
        assert volume.superblock == assembled.superblocks[mount_point]
    staged = next(v for v in volumes.values() if v.plugin == "csi-staging")
    assert staged.driver == "efs.csi.aws.com"


def test_source_server_export_and_version_come_from_the_cloned_block(node):
    assembled, mounts = node
    volumes = by_mount_point(scan_dir(assembled.path))

    shared = volumes[assembled.mount_point(mounts[0])]
    assert (shared.source, shared.server, shared.export) == ("nfsserver2:/tank/os2warp", "nfsserver2", "/tank/os2warp")
    assert (shared.fstype, shared.nfs_version) == ("nfs4", "4.2")
    in_tree = volumes[assembled.mount_point(mounts[2])]
    assert (in_tree.fstype, in_tree.nfs_version, in_tree.server) == ("nfs", "3", "1.2.3.4")


def test_shared_superblocks_name_each_other_but_not_subpath_binds(node):
    assembled, mounts = node
    volumes = by_mount_point(scan_dir(assembled.path))
    first, second = (assembled.mount_point(m) for m in mounts[:2])

    assert volumes[first].shared_with == (second,)
    assert volumes[second].shared_with == (first,)
    # The host mount of the same server has a superblock of its own; the staging mount too.
    for mount in mounts[2:4]:
        assert volumes[assembled.mount_point(mount)].shared_with == ()


def test_server_mounts_count_every_mount_of_the_server_but_subpath_binds(node):
    assembled, mounts = node
    volumes = by_mount_point(scan_dir(assembled.path))

    # Two pod mounts and the host mount /mnt/backup use nfsserver2; the subPath bind does not count.
    assert volumes[assembled.mount_point(mounts[0])].server_mounts == 3
    assert volumes[assembled.mount_point(mounts[2])].server_mounts == 1


def test_effective_options_come_from_mountstats_with_kernel_defaults(node):
    assembled, mounts = node
    volume = by_mount_point(scan_dir(assembled.path))[assembled.mount_point(mounts[2])]

    assert volume.options_source is OptionsSource.MOUNTSTATS
    options = set(volume.effective_options)
    # /A as the kernel printed it: NFSv3, 32 KiB, nolock, attribute cache times 60.
    assert {"vers=3", "rsize=32768", "nolock", "local_lock=all", "acregmin=60", "acdirmax=60"} <= options
    # Never printed by the kernel at their defaults, filled in.
    assert {"lookupcache=all", "cto", "nconnect=1"} <= options
    # mountstats' opts never show the server's address; mountinfo's super options do.
    assert not any(option.startswith("addr=") for option in options)
    assert volume.server_address == "1.2.3.4"


def test_without_mountstats_the_super_options_are_used_with_defaults_filled_in(node):
    assembled, mounts = node
    (assembled.path / "1" / "mountstats").write_text("")
    volume = by_mount_point(scan_dir(assembled.path))[assembled.mount_point(mounts[0])]

    assert volume.options_source is OptionsSource.MOUNTINFO
    # mountinfo leaves acregmin=3 (the default) out; it is filled back in.
    assert {"vers=4.2", "acregmin=3", "acdirmax=60", "addr=192.0.2.156"} <= set(volume.effective_options)
    assert (volume.connections, volume.operations) == (None, {})
    assert volume.nfs_version == "4.2"


def test_a_read_only_bind_of_a_read_write_superblock_is_read_only(tmp_path):
    mount = Mount("pv-ro", pod_uid=A, sample_mount="/C")
    assembled = assemble_proc_root(tmp_path, [mount])
    mountinfo = assembled.path / "1" / "mountinfo"
    mountinfo.write_text(mountinfo.read_text().replace(" rw,relatime shared:200 ", " ro,relatime shared:200 "))

    (volume,) = scan_dir(assembled.path).volumes

    assert "ro" in volume.effective_options and "rw" not in volume.effective_options


def test_operations_are_busiest_first(node):
    assembled, mounts = node
    volume = by_mount_point(scan_dir(assembled.path))[assembled.mount_point(mounts[2])]

    ops = [totals.ops for totals in volume.operations.values()]
    assert ops == sorted(ops, reverse=True) and all(ops)
    # /A's synthetic READ line of the telegraf sample: 600 601 602 603 604 605 606 607.
    read = volume.operations["READ"]
    assert (read.ops, read.queue_ms, read.rtt_ms, read.execute_ms, read.errors) == (600, 605, 606, 607, None)
    assert read.avg_rtt_ms == pytest.approx(606 / 600)


def test_kubelet_root_behind_a_symlink(tmp_path):
    mount = Mount("pv-a", pod_uid=A)
    assembled = assemble_proc_root(tmp_path, [mount], kubelet_root="/data/kubelet")

    assert scan_dir(assembled.path).volumes == ()
    (volume,) = scan_dir(assembled.path, kubelet_roots=(ROOT, "/data/kubelet")).volumes
    assert volume.mount_point.startswith("/data/kubelet/pods/")


def test_only_the_given_network_fstypes(node):
    assembled, _ = node
    volumes = scan_dir(assembled.path, network_fstypes=("nfs",)).volumes

    assert {volume.fstype for volume in volumes} == {"nfs"}


def test_skipped_lines_of_both_files_are_counted(node):
    assembled, _ = node
    # The telegraf sample ends with a stray 8-column LAYOUTRETURN line after /D's block: every clone
    # of /D carries it (two pods, the subPath bind and the host mount).
    assert scan_dir(assembled.path).skipped_lines == 4


def test_same_mount_point_twice_keeps_each_block(tmp_path):
    """el8.7 rdma capture: /storage/prod is mounted twice with different counters. Pairing by mount point
    alone would give both lines the first block."""
    text = sample_path(RDMA_NCONNECT).read_text()
    devices = parse_mountstats(text).devices
    lines = [
        f"{30 + d.index} 1 0:{60 + d.index} / {d.mount_point} rw,relatime - {d.fstype} {d.device or 'none'} rw"
        for d in devices
    ]
    mountinfo = parse_mountinfo("\n".join(lines))

    paired = pair_mountstats(mountinfo.mounts, devices)

    prod = [(entry, device) for entry, device in zip(mountinfo.mounts, paired, strict=True)
            if entry.mount_point == "/storage/prod"]
    assert len(prod) == 2
    assert [device.index for _, device in prod] == sorted(device.index for _, device in prod)
    assert prod[0][1].operations["LOOKUP"].ops != prod[1][1].operations["LOOKUP"].ops


def test_a_block_whose_source_disagrees_is_not_paired(tmp_path):
    assembled = assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=A, sample_mount="/C")])
    mountinfo = assembled.path / "1" / "mountinfo"
    mountinfo.write_text(mountinfo.read_text().replace("nfsserver1:/vol/export1/bread_recipes", "other:/export"))

    (volume,) = scan_dir(assembled.path).volumes

    assert volume.options_source is OptionsSource.MOUNTINFO
    assert volume.source == "other:/export"


def test_nconnect_connections_from_the_rdma_capture(tmp_path):
    mounts = [Mount("pv-prod", pod_uid=A, sample_mount="/storage/prod"),
              Mount("pv-test", pod_uid=B, sample_mount="/storage/test")]
    assembled = assemble_proc_root(tmp_path, mounts, sample=RDMA_NCONNECT)
    volumes = by_mount_point(scan_dir(assembled.path))

    assert len(volumes) == 2
    for volume in volumes.values():
        assert volume.connections == 8
        assert "nconnect=8" in volume.effective_options and "proto=rdma" in volume.effective_options
        # Both are example.com, but mountinfo's addr= (the mount address here) differs: two clients.
        assert volume.server_mounts == 1


def test_wrapped_counters_are_left_out_and_said(tmp_path):
    assembled = assemble_proc_root(tmp_path, [Mount("home", pod_uid=A)], sample=KRB5P_WRAPPED)
    (volume,) = scan_dir(assembled.path).volumes

    access = volume.operations["ACCESS"]
    assert access.queue_ms is None and access.avg_queue_ms is None
    assert (access.ops, access.rtt_ms) == (69477, 105209)
    assert any("ACCESS" in note and "queue_ms" in note for note in volume.notes)
    for totals in volume.operations.values():
        for value in (totals.ops, totals.errors, totals.rtt_ms, totals.execute_ms, totals.queue_ms):
            assert value is None or value < WRAPPED_COUNTER_FLOOR


EFS_TLS_MOUNTINFO = (
    "310 25 0:{minor} / {mount_point} rw,relatime shared:1 - nfs4 127.0.0.1:/ rw,vers=4.1,rsize=1048576,"
    "wsize=1048576,namlen=255,hard,noresvport,proto=tcp,port={port},timeo=600,retrans=2,sec=sys,"
    "clientaddr=127.0.0.1,local_lock=none,addr=127.0.0.1"
)


def test_efs_over_tls_keeps_the_tunnel_source_and_says_so():
    lines = [
        EFS_TLS_MOUNTINFO.format(minor=71, port=20049,
                                 mount_point=f"{ROOT}/pods/{A}/volumes/kubernetes.io~csi/pv-uploads/mount"),
        EFS_TLS_MOUNTINFO.format(minor=72, port=20050,
                                 mount_point=f"{ROOT}/pods/{B}/volumes/kubernetes.io~csi/pv-imports/mount"),
    ]
    scan = scan_node(parse_mountinfo("\n".join(lines)), parse_mountstats(""), kubelet_roots=[ROOT])

    volumes = {volume.volume_name: volume for volume in scan.volumes}
    uploads, imports = volumes["pv-uploads"], volumes["pv-imports"]
    assert (uploads.source, uploads.server, uploads.export) == ("127.0.0.1:/", "127.0.0.1", "/")
    assert "port=20049" in uploads.effective_options and "port=20050" in imports.effective_options
    (note,) = uploads.notes
    assert "TLS tunnel on port 20049" in note
    # Each efs-utils tunnel has its own local port, so each is its own NFS client.
    assert uploads.server_mounts == imports.server_mounts == 1


@pytest.mark.parametrize(
    ("source", "parts"),
    [
        ("fs-0123.efs.eu-west-1.amazonaws.com:/", ("fs-0123.efs.eu-west-1.amazonaws.com", "/")),
        ("10.0.0.5:/exports/a:b", ("10.0.0.5", "/exports/a:b")),
        ("[fd00::5]:/exports", ("fd00::5", "/exports")),
        ("tmpfs", (None, None)),
        ("server:relative", (None, None)),
        ("", (None, None)),
    ],
)
def test_split_source(source, parts):
    assert split_source(source) == parts


# -- check_volume ------------------------------------------------------------------------------


def volume_with(options, *, shared_with=(), connections=1, server_mounts=1, mount_point=None) -> NodeVolume:
    return NodeVolume(
        pod_uid=A, volume_name="pv-a", plugin="csi", driver=None,
        mount_point=mount_point or f"{ROOT}/pods/{A}/volumes/kubernetes.io~csi/pv-a/mount",
        fstype="nfs4", source="fs-1.efs:/", server="fs-1.efs", export="/", superblock="0:101",
        effective_options=tuple(options.split(",")), options_source=OptionsSource.MOUNTSTATS,
        shared_with=tuple(shared_with), nfs_version="4.1", connections=connections, server_mounts=server_mounts,
    )


CACHED_ON_EFS = resolve_policy(provisioner="efs.csi.aws.com", cache_policy="cached").options
CACHED_MOUNT = ("rw,vers=4.1,rsize=1048576,wsize=1048576,hard,noresvport,proto=tcp,timeo=600,retrans=2,"
                "acregmin=600,acregmax=600,acdirmin=600,acdirmax=600,sec=sys")
STRICT_MOUNT = CACHED_MOUNT.replace("=600,", "=0,").replace("acdirmax=600", "acdirmax=0") + ",lookupcache=none"
OTHER_POD = f"{ROOT}/pods/{B}/volumes/kubernetes.io~csi/pv-a/mount"


def reasons(result):
    return [finding.reason for finding in result.findings]


def test_a_mount_with_the_declared_options_is_compliant():
    result = check_volume(volume_with(CACHED_MOUNT, shared_with=[OTHER_POD]), CACHED_ON_EFS, required=["hard"])

    assert result.compliant and result.findings == ()


def test_options_that_differ_without_sharing_are_option_mismatches_only():
    result = check_volume(volume_with(STRICT_MOUNT), CACHED_ON_EFS)

    assert not result.compliant
    assert set(reasons(result)) == {Reason.OPTION_MISMATCH}
    assert {f.option for f in result.findings} >= {"acregmin", "lookupcache"}
    assert all("restart the pod" in f.remedy for f in result.findings)


#: The cached mount, as a later mount that asked for timeo=600 sees it after another made the superblock with 100.
INHERITED_TIMEO_MOUNT = CACHED_MOUNT.replace("timeo=600", "timeo=100")


def test_options_that_differ_on_a_shared_superblock_name_the_other_consumer():
    result = check_volume(volume_with(INHERITED_TIMEO_MOUNT, shared_with=[OTHER_POD]), CACHED_ON_EFS)

    (shared,) = [f for f in result.findings if f.reason is Reason.SUPERBLOCK_SHARED]
    assert shared.other_mounts == (OTHER_POD,)
    assert f"pod {B}, volume pv-a" in shared.message
    assert "timeo=600" in shared.message
    assert shared.severity is Severity.ERROR
    assert "nosharecache" in shared.remedy and "move" in shared.remedy and "data risk" in shared.remedy


def test_a_shared_superblock_is_not_blamed_for_options_the_kernel_compares():
    # Mounts that differ in the ac* times or lookupcache get superblocks of their own (kernel lab): the
    # mount sharing this one asked for the strict options too, so the PV is to blame, not the sharing.
    result = check_volume(volume_with(STRICT_MOUNT, shared_with=[OTHER_POD]), CACHED_ON_EFS)

    assert set(reasons(result)) == {Reason.OPTION_MISMATCH}


def test_sharing_with_a_staging_mount_or_a_host_mount_says_what_they_are():
    staging = f"{ROOT}/plugins/kubernetes.io/csi/efs.csi.aws.com/{'ab' * 32}/globalmount"
    result = check_volume(volume_with(INHERITED_TIMEO_MOUNT, shared_with=[staging, "/mnt/efs"]), CACHED_ON_EFS)

    (shared,) = [f for f in result.findings if f.reason is Reason.SUPERBLOCK_SHARED]
    assert "staging mount of CSI driver efs.csi.aws.com" in shared.message
    assert "/mnt/efs (not a pod volume)" in shared.message


def test_a_warning_only_drift_shares_at_warning_severity():
    result = check_volume(volume_with(CACHED_MOUNT.replace("noresvport", "resvport"), shared_with=[OTHER_POD]),
                          CACHED_ON_EFS)

    (shared,) = [f for f in result.findings if f.reason is Reason.SUPERBLOCK_SHARED]
    assert shared.severity is Severity.WARNING
    assert "noresvport" in shared.message


def test_information_only_findings_do_not_blame_the_superblock():
    # accesspoint never reaches the mount table (efs-utils consumes it): nothing to blame on sharing.
    declared = {**CACHED_ON_EFS, "tls": True}
    result = check_volume(volume_with(CACHED_MOUNT, shared_with=[OTHER_POD]), declared)

    assert Reason.SUPERBLOCK_SHARED not in reasons(result)


def test_forbidden_and_required_options_count_as_drift():
    result = check_volume(volume_with(INHERITED_TIMEO_MOUNT + ",nolock", shared_with=[OTHER_POD]), CACHED_ON_EFS,
                          forbidden=["nolock"], required=["soft"])

    assert not result.compliant
    assert {f.option for f in result.findings if f.reason is Reason.OPTION_MISMATCH} >= {
        "nolock", "soft"}
    # Only timeo could have come from the shared superblock; nolock and soft are the mount's own.
    (shared,) = [f for f in result.findings if f.reason is Reason.SUPERBLOCK_SHARED]
    assert "timeo=600" in shared.message and "nolock" not in shared.message


def test_nconnect_ignored_when_another_mount_of_the_server_came_first():
    declared = {**CACHED_ON_EFS, "nconnect": 8}
    result = check_volume(volume_with(CACHED_MOUNT + ",nconnect=1", connections=1, server_mounts=3), declared)

    (ignored,) = [f for f in result.findings if f.reason is Reason.NCONNECT_IGNORED]
    assert (ignored.expected, ignored.actual, ignored.severity) == (8, 1, Severity.WARNING)
    assert "2 other mount(s)" in ignored.message and "fs-1.efs" in ignored.message


@pytest.mark.parametrize(
    ("declared_nconnect", "connections", "server_mounts"),
    [(8, 8, 3), (8, 1, 1), (None, 1, 3), (8, None, 3)],
)
def test_nconnect_not_blamed_on_other_mounts(declared_nconnect, connections, server_mounts):
    declared = dict(CACHED_ON_EFS) if declared_nconnect is None else {**CACHED_ON_EFS, "nconnect": declared_nconnect}
    result = check_volume(volume_with(CACHED_MOUNT, connections=connections, server_mounts=server_mounts), declared)

    assert Reason.NCONNECT_IGNORED not in reasons(result)


def test_the_operator_can_check_a_reported_volume_as_is():
    reported = MountedVolume(
        pod_uid=A, volume_name="pv-a", plugin="csi", mount_point=f"{ROOT}/pods/{A}/volumes/kubernetes.io~csi/pv-a/mount",
        fstype="nfs4", source="fs-1.efs:/", server="fs-1.efs", export="/", superblock="0:101",
        effective_options=STRICT_MOUNT.split(","), options_source="mountstats", shared_with=[OTHER_POD],
        connections=1, server_mounts=2,
    )
    result = check_volume(reported, {**CACHED_ON_EFS, "nconnect": 4})

    assert {Reason.SUPERBLOCK_SHARED, Reason.NCONNECT_IGNORED} <= set(reasons(result))
    assert result.to_dict()["compliant"] is False


def test_a_scanned_node_checks_end_to_end(node):
    assembled, mounts = node
    volumes = by_mount_point(scan_dir(assembled.path))
    strict = resolve_policy(provisioner="nfs", cache_policy="strict", mount_options=["timeo=100"]).options

    result = check_volume(volumes[assembled.mount_point(mounts[0])], strict)

    shared = [f for f in result.findings if f.reason is Reason.SUPERBLOCK_SHARED]
    assert shared and shared[0].other_mounts == (assembled.mount_point(mounts[1]),)


def test_an_undeclared_sync_is_its_own_reason_and_not_blamed_on_the_superblock():
    result = check_volume(volume_with(CACHED_MOUNT.replace("rw,", "rw,sync,"), shared_with=[OTHER_POD]),
                          CACHED_ON_EFS, pv_mount_options=["vers=4.1", "sync"], storage_class="importer-v1")

    (undeclared,) = [f for f in result.findings if f.reason is Reason.UNDECLARED_OPTION]
    assert undeclared.option == "sync" and undeclared.severity is Severity.ERROR
    assert "The PersistentVolume's spec.mountOptions (StorageClass importer-v1) carry it" in undeclared.message
    assert "Remove the option where it comes from" in undeclared.remedy
    assert Reason.SUPERBLOCK_SHARED not in reasons(result)


def reported_with(**fields) -> ReportedMount:
    """A volume as the agent writes it into its report and the operator reads it back."""
    volume = MountedVolume(
        pod_uid=A, volume_name="pv-a", plugin="csi", mount_point=f"{ROOT}/pods/{A}/volumes/kubernetes.io~csi/pv-a/mount",
        fstype="nfs4", source="fs-1.efs:/", server="fs-1.efs", export="/", superblock="0:101",
        effective_options=CACHED_MOUNT.split(","), options_source="mountstats", connections=1, **fields)
    (mount,) = read_report("node-a", scanTime="2026-03-01T00:00:00Z",
                           volumes=[volume.model_dump(mode="json", by_alias=True)]).mounts
    return mount


def test_a_reported_plateau_transport_and_stuck_processes_are_findings_that_are_not_drift():
    from mountwarden.api.nodemountreport import MountActivity, ProcessStates
    from mountwarden.core.node.activity import GBIT, Thresholds

    reported = reported_with(
        server_responding=False,
        activity=MountActivity(window_seconds=300, since="scans", read_bytes_per_second=4.5 * GBIT,
                               write_bytes_per_second=0, requests_per_second=10, retransmissions_per_second=0.5,
                               major_timeouts_per_second=0, reconnects_per_second=0, connections=1, data_requests=9000,
                               avg_queue_ms=12.0, avg_rtt_ms=2.0, avg_execute_ms=14.5),
        processes=ProcessStates(samples=50, uninterruptible=49, processes=3, uninterruptible_share=0.98))
    result = check_volume(reported, CACHED_ON_EFS, thresholds=Thresholds(instance_bandwidth_gbps=25.0,
                                                                        file_system_limit_gbps=12.58),
                          kernel_release="6.1.0-57-amd64")

    assert reasons(result) == [Reason.THROUGHPUT_PLATEAU, Reason.TRANSPORT_UNHEALTHY,
                               Reason.STUCK_ON_NFS]
    plateau = result.findings[0]
    assert "nconnect=3: ceil(min of the instance bandwidth 25 Gbit/s" in plateau.remedy
    assert f"pod {A}" in result.findings[2].message and "did not answer" in result.findings[2].message


def test_without_thresholds_no_activity_is_judged():
    from mountwarden.api.nodemountreport import ProcessStates

    reported = reported_with(processes=ProcessStates(samples=50, uninterruptible=50, processes=1,
                                                     uninterruptible_share=1.0))
    assert check_volume(reported, CACHED_ON_EFS).findings == ()


def test_nconnect_the_kernel_did_not_open_is_found_from_its_transports_not_its_version():
    declared = {**CACHED_ON_EFS, "nconnect": 4}
    # One xprt: line on the server's only mount: whatever the release, the kernel did not do nconnect.
    asked = f"{CACHED_MOUNT},nconnect=4"
    result = check_volume(volume_with(asked, connections=1, server_mounts=1), declared,
                          kernel_release="4.14.355-275.582.amzn2.x86_64")
    (ignored,) = [f for f in result.findings if f.reason is Reason.NCONNECT_IGNORED]
    assert "the kernel opened one connection (one xprt: line in mountstats)" in ignored.message
    assert "Linux 4.14.355-275.582.amzn2.x86_64" in ignored.message
    # RHEL 8's 4.18 with nconnect backported opened its four: nothing to say, old release or not.
    backported = check_volume(volume_with(asked, connections=4, server_mounts=1), declared,
                              kernel_release="4.18.0-513.el8.x86_64")
    assert not [f for f in backported.findings if f.reason is Reason.NCONNECT_IGNORED]
