"""The agent under faults: /proc entries that vanish mid-scan or cannot be read. No crash, no lost finding."""

import shutil

import pytest
from tests.procroot import Mount, Process, assemble_proc_root, pod_uid

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.scan import scan_node_report
from mountwarden.agent.sqlitescan import report_findings

pytestmark = pytest.mark.chaos

SQLITE_LOCK = "1: POSIX  ADVISORY  READ  4242 00:{minor:02x}:77 1073741826 1073742335\n"


def node(tmp_path):
    mounts = [Mount("pv-db", pod_uid=pod_uid("db")), Mount("pv-other", pod_uid=pod_uid("other"))]
    cgroup = f"0::/kubepods/besteffort/pod{pod_uid('db')}/{'b' * 64}\n"
    assembled = assemble_proc_root(tmp_path / "proc", mounts, locks=None,
                                   processes=[Process(4242, cgroup=cgroup, maps="")])
    minor = int(assembled.superblocks[assembled.mount_point(mounts[0])].split(":")[1])
    (assembled.path / "locks").write_text(SQLITE_LOCK.format(minor=minor))
    return assembled


def scan(path):
    proc = ProcRoot(path)
    result = scan_node_report(proc, node_name="n", kubelet_root="/var/lib/kubelet", network_fstypes=("nfs", "nfs4"),
                              sqlite_scan=report_findings)
    return result.spec, proc.counters


def test_a_lock_holder_that_exits_mid_scan_keeps_its_finding(tmp_path):
    assembled = node(tmp_path)
    shutil.rmtree(assembled.path / "4242")  # the process is gone between /proc/locks and its own files
    spec, counters = scan(assembled.path)
    (finding,) = spec.sqlite
    assert finding.pid == 4242 and finding.volume_name == "pv-db" and finding.pod_uid is None
    assert counters.vanished >= 1
    assert {volume.volume_name for volume in spec.volumes} == {"pv-db", "pv-other"}


def test_an_unreadable_mountstats_falls_back_to_mountinfo(tmp_path):
    assembled = node(tmp_path)
    stats = assembled.path / "1" / "mountstats"
    stats.unlink()
    stats.mkdir()  # reading it fails (EISDIR), as an unreadable file would
    spec, counters = scan(assembled.path)
    assert len(spec.volumes) == 2
    assert all(volume.options_source == "mountinfo" and volume.effective_options for volume in spec.volumes)
    assert counters.vanished + counters.forbidden >= 1
    assert len(spec.sqlite) == 1  # the SQLite finding does not depend on mountstats


def test_a_cgroup_file_that_cannot_be_read_loses_only_the_pod(tmp_path):
    assembled = node(tmp_path)
    cgroup = assembled.path / "4242" / "cgroup"
    cgroup.unlink()
    cgroup.mkdir()
    spec, _ = scan(assembled.path)
    (finding,) = spec.sqlite
    assert finding.pod_uid is None and finding.volume_name == "pv-db"


def test_garbage_in_every_file_is_skipped_and_counted(tmp_path):
    assembled = node(tmp_path)
    for name in ("mountinfo", "mountstats"):
        path = assembled.path / "1" / name
        path.write_text(path.read_text() + "\x00garbage line \\777 with nothing\n:::\n")
    (assembled.path / "locks").write_text((assembled.path / "locks").read_text() + "not a lock\n\n-> nothing\n")
    spec, _ = scan(assembled.path)
    assert len(spec.volumes) == 2 and len(spec.sqlite) == 1
    assert spec.skipped_lines >= 2
