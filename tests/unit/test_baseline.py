"""The baseline (mountwarden.core.baseline): what a pod volume no StorageProfile governs is held to.

The mounts are written as the kernel prints them (mountstats' opts, the agent's effectiveOptions): the
import's flags as the lab VM showed them for `sync,actimeo=0,lookupcache=none`, NFSv3 with nolock as
`nolock,local_lock=all`, NFSv4 with nolock as `local_lock=none` (kernel lab: operator/mountwarden/core/
options/kernel_facts.json).
"""

import pytest

from mountwarden.core.baseline import BASELINE_POLICY, UngovernedMount, audit, judge
from mountwarden.core.findings import Reason, Severity
from mountwarden.core.node.activity import ProcessSamples
from mountwarden.core.node.report import ReportedMount, SqliteUse

KERNEL_V42 = ("rw", "vers=4.2", "rsize=131072", "wsize=131072", "namlen=255", "hard", "proto=tcp", "timeo=600",
              "retrans=2", "sec=sys", "local_lock=none")
IMPORT_FLAGS = ("sync", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0", "lookupcache=none")
EFS_AWS = ("rw", "vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
           "proto=tcp", "local_lock=none")


def mount(options, *, pod="web-0", node="n1", volume="pv-a", pv_options=(), efs=False, shared_with=(),
          connections=1, server_mounts=1, sqlite=(), processes=None) -> UngovernedMount:
    uid = f"uid-{pod}"
    reported = ReportedMount(uid, volume, f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~nfs/{volume}", "0:52",
                             tuple(options), tuple(shared_with), server="10.0.0.5", connections=connections,
                             server_mounts=server_mounts, processes=processes)
    return UngovernedMount(uid, "shop", pod, node, volume, reported,
                           tuple(pv_options) if pv_options is not None else None, "legacy-nfs", efs=efs,
                           kernel_release="6.1.0-44-amd64", sqlite=tuple(sqlite))


def reasons(verdict) -> list[str]:
    return [str(f.reason) for f in verdict.findings]


def test_the_imports_flags_are_named_as_the_kernel_shows_them_and_metered_on_efs():
    on_nfs = judge(mount((*KERNEL_V42, *IMPORT_FLAGS)))
    (found,) = on_nfs.findings
    assert found.reason is Reason.ROUND_TRIP_OPTIONS and found.severity is Severity.WARNING
    assert found.option == "sync,actimeo=0,lookupcache=none"
    assert "every write() wait for the server" in found.message and "8 hours" in found.message
    assert "metered" not in found.message
    on_efs = judge(mount((*EFS_AWS, *IMPORT_FLAGS), efs=True))
    assert reasons(on_efs) == ["RoundTripOptions"]
    assert "metered as at least 4 KiB on EFS" in on_efs.findings[0].message


@pytest.mark.parametrize("options", [("acregmin=0", "acregmax=0", "lookupcache=positive"),  # staging
                                     ("acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600")])  # cached
def test_a_preset_that_costs_at_most_one_getattr_per_stat_meets_the_baseline(options):
    assert judge(mount((*KERNEL_V42, *options))).meets_baseline


def test_soft_is_a_hazard_only_where_someone_writes():
    (found,) = judge(mount((*KERNEL_V42, "soft"))).findings
    assert found.reason is Reason.SOFT_WRITABLE_MOUNT and found.severity is Severity.ERROR
    assert "timeo=600, retrans=2" in found.message and "nfs(5)" in found.message
    read_only = [o if o != "rw" else "ro" for o in KERNEL_V42]
    assert judge(mount((*read_only, "soft"))).meets_baseline


def test_locks_kept_on_each_node_are_a_hazard_once_writers_are_on_two_nodes():
    v3 = ("rw", "vers=3", "hard", "timeo=600", "retrans=2", "nolock", "local_lock=all")
    alone = audit([mount(v3, pod="a-0", node="n1"), mount(v3, pod="a-1", node="n1")])
    assert all(v.meets_baseline for v in alone)
    spread = audit([mount(v3, pod="a-0", node="n1"), mount(v3, pod="a-1", node="n2")])
    for verdict in spread:
        (found,) = verdict.findings
        assert found.reason is Reason.LOCAL_LOCKS_ACROSS_NODES and found.evidence["nodes"] == "n1,n2"
        assert "nolock,local_lock=all" in found.message
    # NFSv4 ignores nolock: the kernel shows local_lock=none, and locks reach the server.
    v4 = audit([mount(KERNEL_V42, pod="b-0", node="n1"), mount(KERNEL_V42, pod="b-1", node="n2")])
    assert all(v.meets_baseline for v in v4)
    # A reader on another node takes no lock that matters.
    reader = [o if o != "rw" else "ro" for o in v3]
    assert all(v.meets_baseline for v in audit([mount(v3, pod="c-0", node="n1"), mount(reader, pod="c-1", node="n2")]))


def test_efs_without_noresvport_misses_what_aws_recommends():
    without = [o for o in EFS_AWS if o != "noresvport"]
    (found,) = judge(mount(without, efs=True)).findings
    assert found.reason is Reason.MISSING_NORESVPORT and "EFS User Guide" in found.message
    assert judge(mount(EFS_AWS, efs=True)).meets_baseline
    assert judge(mount(without, efs=False)).meets_baseline  # another NFS server: no AWS advice applies


def test_what_the_kernel_took_from_a_shared_superblock_or_a_first_mount_is_said_against_what_the_pv_asked():
    shared = judge(mount([o if o != "timeo=600" else "timeo=100" for o in KERNEL_V42], pv_options=("timeo=600",),
                         shared_with=("/var/lib/kubelet/pods/other/volumes/kubernetes.io~nfs/pv-b",)))
    assert reasons(shared) == ["SuperblockShared"]
    ignored = judge(mount((*KERNEL_V42, "nconnect=4"), pv_options=("nconnect=4",), connections=1, server_mounts=2))
    assert reasons(ignored) == ["NconnectIgnored"]


def test_sqlite_and_how_the_mount_is_doing_are_part_of_it():
    database = SqliteUse("uid-web-0", "pv-a", Severity.CRITICAL, "wal", "/data/app.db", "WAL on NFS")
    stuck = ProcessSamples(samples=20, uninterruptible=18, processes=2)
    found = judge(mount(KERNEL_V42, sqlite=[database], processes=stuck))
    assert sorted(reasons(found)) == ["SQLiteOnNFS", "StuckOnNFS"]


def test_published_findings_name_the_pod_the_baseline_policy_and_carry_their_remedy():
    verdict = judge(mount((*KERNEL_V42, *IMPORT_FLAGS, "soft"), pod="importer-0", node="n3", volume="pv-import"))
    published = verdict.published()
    assert {f.reason for f in published} == {Reason.ROUND_TRIP_OPTIONS, Reason.SOFT_WRITABLE_MOUNT}
    for finding in published:
        assert finding.profile == BASELINE_POLICY
        assert (finding.subject.kind, finding.subject.namespace, finding.subject.name) == ("Pod", "shop", "importer-0")
        assert finding.evidence["node"] == "n3" and finding.evidence["volume"] == "pv-import"
        assert finding.message.startswith("pv-import on n3 (no StorageProfile governs it: the baseline): ")
        assert finding.remedy and finding.message.endswith(finding.remedy)
