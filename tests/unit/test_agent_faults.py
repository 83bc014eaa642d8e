"""The agent under faults: /proc entries that vanish mid-scan or cannot be read. No crash, no lost finding."""

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.procroot import Mount, Process, assemble_proc_root, pod_uid

from mountwarden.adapters.procreader import MAX_MOUNT_TABLE_READS, ProcRoot
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


@dataclass
class MountedMidScan(ProcRoot):
    """A proc root whose mount table changes right after the agent's first read of mountinfo.

    As when the kubelet mounts (or unmounts) a pod volume between the agent's read of mountinfo and its
    read of mountstats: the files are swapped for those of ``after`` then, once.
    """

    after: Path | None = None
    reads: list[str] = field(default_factory=list)

    def _text(self, *parts, counted: bool = True):
        text = super()._text(*parts, counted=counted)
        self.reads.append(str(parts[-1]))
        if self.after is not None and self.reads.count("mountinfo") == 1 and parts[-1] == "mountinfo":
            for name in ("mountinfo", "mountstats"):
                shutil.copy(self.after / "1" / name, self.path / "1" / name)
        return text


def mount_tables(tmp_path, before: list[Mount], after: list[Mount]):
    first = assemble_proc_root(tmp_path / "proc", before, locks=None)
    second = assemble_proc_root(tmp_path / "after", after, locks=None)
    proc = MountedMidScan(first.path, after=second.path)
    result = scan_node_report(proc, node_name="n", kubelet_root="/var/lib/kubelet", network_fstypes=("nfs", "nfs4"))
    return {volume.volume_name: volume for volume in result.spec.volumes}, proc


STABLE = Mount("pv-stable", pod_uid=pod_uid("stable"), sample_mount="/B")
NEW = Mount("pv-new", pod_uid=pod_uid("new"), sample_mount="/D")


def test_a_volume_mounted_between_reading_mountinfo_and_mountstats_is_seen_whole(tmp_path):
    volumes, proc = mount_tables(tmp_path, [STABLE], [STABLE, NEW])
    # Read once each, mountinfo had no pv-new while mountstats had it: the volume went unreported.
    assert set(volumes) == {"pv-stable", "pv-new"}
    assert {v.options_source for v in volumes.values()} == {"mountstats"} and volumes["pv-new"].operations
    assert proc.reads.count("mountinfo") >= 2 and proc.counters.inconsistent == 0


def test_a_volume_unmounted_between_the_two_reads_is_not_reported_half(tmp_path):
    volumes, proc = mount_tables(tmp_path, [STABLE, NEW], [STABLE])
    # Read once each, pv-new was still in mountinfo but gone from mountstats: reported from mountinfo alone,
    # without its statistics, as if it were still mounted.
    assert set(volumes) == {"pv-stable"} and volumes["pv-stable"].options_source == "mountstats"


def test_a_mount_table_that_never_settles_is_taken_as_it_last_was_and_counted(tmp_path):
    first = assemble_proc_root(tmp_path / "proc", [STABLE], locks=None)
    churn = [assemble_proc_root(tmp_path / f"state-{n}", [STABLE, *([NEW] if n % 2 else [])], locks=None).path
             for n in range(2)]

    class Churning(ProcRoot):
        reads = 0

        def _text(self, *parts, counted: bool = True):
            text = super()._text(*parts, counted=counted)
            if parts[-1] == "mountstats":  # something is mounted or unmounted after every round
                Churning.reads += 1
                for name in ("mountinfo", "mountstats"):
                    shutil.copy(churn[Churning.reads % 2] / "1" / name, self.path / "1" / name)
            return text

    proc = Churning(first.path)
    result = scan_node_report(proc, node_name="n", kubelet_root="/var/lib/kubelet", network_fstypes=("nfs", "nfs4"))
    assert proc.counters.inconsistent == 1 and Churning.reads == MAX_MOUNT_TABLE_READS
    assert "pv-stable" in {volume.volume_name for volume in result.spec.volumes}
