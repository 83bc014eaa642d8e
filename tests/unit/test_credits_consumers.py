"""Who drains a file system: per-op counters from the node reports, metered as EFS meters them, ranked."""

from datetime import UTC, datetime

import pytest
from tests.procroot import Mount, assemble_proc_root, pod_uid
from tests.support import read_report

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.report import content
from mountwarden.agent.scan import scan_node_report
from mountwarden.api.nodemountreport import read_node_report
from mountwarden.api.storageprofile import StorageProfileSpec
from mountwarden.core.credits import KIB, MIB
from mountwarden.core.credits.bucket import ThroughputMode
from mountwarden.core.credits.consumers import (
    ReportedVolume,
    VolumeOwners,
    cost_basis,
    estimate_metering,
    price_namespaces,
    reported_volumes,
    summarize_consumers,
)
from mountwarden.core.credits.pricing import SECONDS_PER_MONTH
from mountwarden.core.credits.units import GIB
from mountwarden.core.node.report import OperationCounters

FS, OTHER_FS = "fs-0123456789abcdef0", "fs-0fedcba987654321f"


def test_reads_count_a_third_writes_in_full_and_metadata_at_4_kib():
    estimate = estimate_metering({
        # 10 reads of 1 MiB, plus headers; 1,000 writes of 4 KiB (SQLite pages), plus headers.
        "READ": OperationCounters(10, bytes_sent=10 * 120, bytes_received=10 * (MIB + 100)),
        "WRITE": OperationCounters(1000, bytes_sent=1000 * (4 * KIB + 150), bytes_received=1000 * 100),
        # 500 GETATTRs of ~200 bytes each way: the 4 KiB minimum wins.
        "GETATTR": OperationCounters(500, bytes_sent=500 * 200, bytes_received=500 * 250),
        "LOOKUP": OperationCounters(20),
    })
    assert estimate.read_bytes == 10 * (MIB + 100)
    assert estimate.write_bytes == 1000 * (4 * KIB + 150)
    assert estimate.metadata_ops == 520
    assert estimate.metered_bytes == pytest.approx(10 * (MIB + 100) / 3 + 1000 * (4 * KIB + 150) + 520 * 4 * KIB)
    # Elastic: the writes at 32 KiB each; the 1 MiB reads as they are, in full.
    assert estimate.elastic_bytes == pytest.approx(10 * (MIB + 100) + 1000 * 32 * KIB + 520 * 4 * KIB)
    assert not estimate.bytes_missing


def test_small_reads_meet_the_4_kib_minimum_before_the_third():
    estimate = estimate_metering({"READ": OperationCounters(300, bytes_received=300 * 512)})
    assert estimate.metered_bytes == pytest.approx(300 * 4 * KIB / 3)


def test_a_report_without_byte_counters_counts_the_minimum_and_says_so():
    estimate = estimate_metering({"WRITE": OperationCounters(10)})
    assert estimate.metered_bytes == 10 * 4 * KIB and estimate.bytes_missing


def wire_volume(pod, volume, superblock, age, operations):
    return {"podUid": pod, "volumeName": volume, "superblock": superblock, "ageSeconds": age,
            "mountPoint": f"/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/{volume}/mount",
            "effectiveOptions": ["vers=4.1"], "operations": {
        name: {"ops": ops, "bytesSent": sent, "bytesReceived": received}
        for name, (ops, sent, received) in operations.items()}}


def test_a_reports_counters_are_read_and_broken_ones_dropped():
    volumes = reported_volumes(read_report("node-1", scanTime="2026-12-01T10:00:00Z", volumes=[
        wire_volume("uid-a", "pv-a", "0:101", 100, {"WRITE": (10, 40960, 1000)}),
        {**wire_volume("uid-c", "pv-c", "0:102", None, {}),
         "operations": {"READ": {"ops": -1}, "GETATTR": {"ops": 3}, "LOCK": "not totals"}},
    ]))
    assert [v.volume_name for v in volumes] == ["pv-a", "pv-c"]
    first = volumes[0]
    assert (first.node, first.pod_uid, first.superblock, first.age_seconds) == ("node-1", "uid-a", "0:101", 100)
    assert first.operations == {"WRITE": OperationCounters(10, 40960, 1000)}
    assert first.scan_time == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    # The negative count and the malformed totals are dropped; the mount's age is unknown.
    assert volumes[1].operations == {"GETATTR": OperationCounters(3)}
    assert volumes[1].age_seconds is None
    assert reported_volumes(read_report("node-1", scanTime="2026-12-01T10:00:00Z")) == []


def owners(pods):
    return VolumeOwners.from_mappings(
        pods=pods,
        storage_classes={"pv-a": "scratch-v1", "pv-b": "staging-v2", "pv-c": "staging-v2", "pv-d": "cache-v1",
                         "pv-e": "static-v1"},
        profiles={"scratch-v1": "importer-scratch", "staging-v2": "upload-staging", "cache-v1": "web-cache",
                  "static-v1": "static"},
        file_systems={"importer-scratch": FS, "upload-staging": FS, "static": FS, "web-cache": OTHER_FS},
    )


OWNERS = owners({"uid-a": "data/importer-0", "uid-b": "data/uploader-0", "uid-c": "data/uploader-1",
                 "uid-d": "web/cache-0", "uid-e": "data/static-0"})


def volume(node, pod, pv, superblock, age, **operations):
    return ReportedVolume(node, pod, pv, superblock, age,
                          {name: OperationCounters(*counts) for name, counts in operations.items()})


def test_the_consumers_of_a_file_system_are_ranked_by_metered_rate_with_shared_superblocks_once():
    volumes = [
        # The importer: 1,000 GETATTRs a second for an hour, 4 KiB each: 3.9 MiB/s.
        volume("node-1", "uid-a", "pv-a", "0:101", 3600, GETATTR=(3_600_000,)),
        # Two uploaders on one node share a superblock, so they share counters: 1 MiB/s of writes, once.
        volume("node-2", "uid-b", "pv-b", "0:102", 7200, WRITE=(7200, 7200 * MIB, 0)),
        volume("node-2", "uid-c", "pv-c", "0:102", 7200, WRITE=(7200, 7200 * MIB, 0)),
        # On another file system: left out.
        volume("node-1", "uid-d", "pv-d", "0:103", 60, WRITE=(600, 600 * MIB, 0)),
        # A staging mount (no pod) and a volume of no profile: left out.
        volume("node-1", None, "pv-a", "0:101", 3600, GETATTR=(1,)),
        volume("node-3", "uid-x", "pv-unknown", "0:104", 10, GETATTR=(1,)),
        # Read-only static content: 2.4 MiB/s of 1 MiB reads, metered at a third.
        volume("node-3", "uid-e", "pv-e", "0:105", 100, READ=(240, 0, 240 * MIB)),
    ]
    summary = summarize_consumers(volumes, OWNERS, FS, top=2)
    assert summary.consumers == 3
    assert [c.pods for c in summary.top] == [("data/importer-0",), ("data/uploader-0", "data/uploader-1")]
    importer, uploaders = summary.top
    assert importer.metered_bytes_per_second == pytest.approx(1000 * 4 * KIB)
    assert uploaders.metered_bytes_per_second == pytest.approx(MIB)
    assert uploaders.volumes == ("pv-b", "pv-c") and uploaders.node == "node-2"
    static = summarize_consumers(volumes, OWNERS, FS).top[2]
    assert static.metered_bytes_per_second == pytest.approx(0.8 * MIB)
    assert static.elastic_bytes_per_second == pytest.approx(2.4 * MIB)  # Elastic bills reads in full
    usage = {p.profile: (p.metered_bytes_per_second, p.consumers) for p in summary.profiles}
    assert usage == {"importer-scratch": (pytest.approx(1000 * 4 * KIB), 1), "static": (pytest.approx(0.8 * MIB), 1),
                     "upload-staging": (pytest.approx(MIB), 1)}
    assert [p.profile for p in summary.profiles] == ["importer-scratch", "upload-staging", "static"]
    assert summary.metered_bytes_per_second == pytest.approx(1000 * 4 * KIB + 1.8 * MIB)
    document = summary.to_json()
    assert document["top"][0]["pods"] == ["data/importer-0"] and "4 KiB" in document["notes"][0]


def test_a_superblock_shared_by_two_profiles_is_split_between_them():
    volumes = [volume("node-1", "uid-a", "pv-a", "0:101", 100, WRITE=(100, 100 * MIB, 0)),
               volume("node-1", "uid-b", "pv-b", "0:101", 100, WRITE=(100, 100 * MIB, 0))]
    summary = summarize_consumers(volumes, OWNERS, FS)
    assert summary.consumers == 1 and summary.top[0].profiles == ("importer-scratch", "upload-staging")
    assert {p.profile: p.metered_bytes_per_second for p in summary.profiles} == {
        "importer-scratch": pytest.approx(MIB / 2), "upload-staging": pytest.approx(MIB / 2)}


def test_reports_of_an_older_agent_have_totals_but_no_rate_and_say_so():
    volumes = [volume("node-1", "uid-a", "pv-a", "0:101", None, WRITE=(10,)),
               volume("node-2", "uid-b", "pv-b", "0:102", 10, GETATTR=(10,))]
    summary = summarize_consumers(volumes, OWNERS, FS)
    assert summary.top[0].pods == ("data/uploader-0",)  # those with a rate come first
    assert summary.top[1].metered_bytes_per_second is None
    assert any("no mount age" in note for note in summary.notes)
    assert any("no byte counters" in note for note in summary.notes)


def test_the_file_system_a_profile_watches():
    def watched_file_system(spec: dict) -> tuple[str, str] | None:
        return StorageProfileSpec.model_validate(spec).watched_file_system()

    nfs = {"provisioner": "nfs.csi.k8s.io", "parameters": {"fileSystemId": "fs-00000000"}}
    assert watched_file_system({"backend": nfs, "creditWatch": {"fileSystemId": FS, "region": "eu-west-1"}}) == (
        FS, "eu-west-1")
    efs = {"backend": {"provisioner": "efs.csi.aws.com", "parameters": {"fileSystemId": FS}}}
    assert watched_file_system(efs) == (FS, "")
    assert watched_file_system({"backend": nfs}) is None  # a fileSystemId parameter of anything but EFS is not one


def test_the_agent_reports_byte_counters_and_mount_age_from_real_mountstats(tmp_path):
    # /C of the telegraf sample (NFSv3): 746,337 metadata requests in 1,084,700 s; /B (NFSv4.0): 9,797
    # READs that received 2,000 bytes in all, in 19 s.
    mounts = [Mount("pv-c", pod_uid=pod_uid("c"), sample_mount="/C"),
              Mount("pv-b", pod_uid=pod_uid("b"), sample_mount="/B")]
    assembled = assemble_proc_root(tmp_path, mounts)
    spec = scan_node_report(ProcRoot(assembled.path), node_name="node-1", kubelet_root="/var/lib/kubelet",
                            network_fstypes=("nfs", "nfs4")).spec
    wire = spec.to_wire()
    by_volume = {v["volumeName"]: v for v in wire["volumes"]}
    assert by_volume["pv-c"]["ageSeconds"] == 1_084_700 and by_volume["pv-b"]["ageSeconds"] == 19
    access = by_volume["pv-c"]["operations"]["ACCESS"]
    assert (access["ops"], access["bytesSent"], access["bytesReceived"]) == (596338, 79281020, 71560560)
    assert by_volume["pv-b"]["operations"]["READ"]["bytesReceived"] == 2000
    # The mount age grows every scan, like the counters: it is no reason to rewrite the report.
    assert "ageSeconds" not in str(content(spec))

    volumes = {v.volume_name: v for v in reported_volumes(read_node_report("node-1", wire))}
    c_estimate = estimate_metering(volumes["pv-c"].operations)
    assert c_estimate.metadata_ops == 596338 + 145712 + 2553 + 1698 + 34 + 1 + 1
    assert c_estimate.metered_bytes == 746_337 * 4 * KIB
    b_estimate = estimate_metering(volumes["pv-b"].operations)
    assert b_estimate.read_bytes == 2000
    # 9,797 reads at the 4 KiB minimum, a third; OPEN, CLOSE, LOOKUP, ... at 4 KiB each (ten busiest kept).
    metadata = 19740 + 10211 + 19739 + 10095 + 500 + 96 + 2 + 1 + 1
    assert b_estimate.metered_bytes == pytest.approx(9797 * 4 * KIB / 3 + metadata * 4 * KIB)


def owned(node, pod, pv, superblock, age, owner, **operations):
    return ReportedVolume(node, pod, pv, superblock, age,
                          {name: OperationCounters(*counts) for name, counts in operations.items()}, pod_owner=owner)


NAMESPACED = [
    # data: the importer's 1,000 GETATTRs a second (4 KiB each) and two uploader replicas sharing 1 MiB/s of writes.
    owned("node-1", "uid-a", "pv-a", "0:101", 3600, "Job/importer", GETATTR=(3_600_000,)),
    owned("node-2", "uid-b", "pv-b", "0:102", 7200, "ReplicaSet/uploader-7d9f", WRITE=(7200, 7200 * MIB, 0)),
    owned("node-2", "uid-c", "pv-c", "0:102", 7200, "ReplicaSet/uploader-7d9f", WRITE=(7200, 7200 * MIB, 0)),
    # data too, a bare pod (no controller): 2.4 MiB/s of 1 MiB reads, metered at a third, billed in full by Elastic.
    owned("node-3", "uid-e", "pv-e", "0:105", 100, None, READ=(240, 0, 240 * MIB)),
]
NAMESPACED_OWNERS = owners({"uid-a": "data/importer-0", "uid-b": "data/uploader-0", "uid-c": "data/uploader-1",
                            "uid-e": "web/static-0"})


def test_the_load_is_summed_per_namespace_and_workload_with_shared_superblocks_once():
    summary = summarize_consumers(NAMESPACED, NAMESPACED_OWNERS, FS)
    data, web = summary.namespaces
    assert (data.namespace, web.namespace) == ("data", "web")  # busiest first
    assert data.metered_bytes_per_second == pytest.approx(1000 * 4 * KIB + MIB)
    assert [(w.workload, w.metered_bytes_per_second) for w in data.workloads] == [
        ("data/Job/importer", pytest.approx(1000 * 4 * KIB)),
        ("data/ReplicaSet/uploader-7d9f", pytest.approx(MIB))]  # the two replicas' counters once, not twice
    assert [w.workload for w in web.workloads] == ["web/static-0"]  # a bare pod is its own workload
    assert web.metered_bytes_per_second == pytest.approx(0.8 * MIB)
    # Elastic bills every request: 3.6 M GETATTRs at 4 KiB a month-rate, writes at $0.06/GiB, reads at $0.03/GiB.
    importer = data.workloads[0]
    assert importer.elastic_monthly_usd == pytest.approx(1000 * 4 * KIB / GIB * 0.06 * SECONDS_PER_MONTH)
    assert web.elastic_monthly_usd == pytest.approx(2.4 * MIB / GIB * 0.03 * SECONDS_PER_MONTH)


def test_a_superblock_two_namespaces_share_is_split_evenly_between_them():
    volumes = [owned("node-1", "uid-a", "pv-a", "0:101", 100, "Job/a", WRITE=(100, 100 * MIB, 0)),
               owned("node-1", "uid-b", "pv-b", "0:101", 100, "Job/b", WRITE=(100, 100 * MIB, 0))]
    split = owners({"uid-a": "one/a-0", "uid-b": "two/b-0"})
    rates = {n.namespace: n.metered_bytes_per_second for n in summarize_consumers(volumes, split, FS).namespaces}
    assert rates == {"one": pytest.approx(MIB / 2), "two": pytest.approx(MIB / 2)}


def priced(mode, provisioned=None):
    summary = summarize_consumers(NAMESPACED, NAMESPACED_OWNERS, FS)
    return {row["namespace"]: row for row in price_namespaces(summary, mode, provisioned)}, cost_basis(mode)


def test_elastic_mode_bills_each_namespace_its_own_requests():
    rows, basis = priced(ThroughputMode.ELASTIC)
    data = rows["data"]
    assert data["monthlyCostUsd"] == data["elasticMonthlyCostUsd"] > 0
    assert sum(w["monthlyCostUsd"] for w in data["workloads"]) == pytest.approx(data["monthlyCostUsd"], abs=0.02)
    assert basis.startswith("Elastic") and "$0.03/GB read" in basis and "aws.amazon.com/efs/pricing" in basis


def test_provisioned_mode_splits_the_provisioned_bill_by_share_of_metered_bytes():
    rows, basis = priced(ThroughputMode.PROVISIONED, provisioned=600.0)
    total = 1000 * 4 * KIB + 1.8 * MIB
    assert rows["data"]["share"] == pytest.approx((1000 * 4 * KIB + MIB) / total)
    assert rows["data"]["monthlyCostUsd"] == pytest.approx(600 * rows["data"]["share"], abs=0.01)
    assert sum(row["monthlyCostUsd"] for row in rows.values()) == pytest.approx(600, abs=0.02)
    assert basis.startswith("Provisioned")


def test_bursting_mode_bills_no_throughput_so_a_namespace_has_a_share_and_no_cost():
    rows, basis = priced(ThroughputMode.BURSTING)
    assert all(row["monthlyCostUsd"] is None for row in rows.values())
    assert all(w["monthlyCostUsd"] is None for row in rows.values() for w in row["workloads"])
    assert sum(row["share"] for row in rows.values()) == pytest.approx(1)
    assert rows["data"]["elasticMonthlyCostUsd"] > 0  # what switching to Elastic would bill it
    assert "no throughput is billed" in basis
    # A mode the watch could not read prices nothing either, and says the same.
    assert priced(None)[0]["data"]["monthlyCostUsd"] is None
