"""Per-operation rates between scans, and what /metrics serves."""

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mountwarden.agent.activity import VolumeActivity
from mountwarden.agent.metrics import SERIES_PER_VOLUME, AgentMetrics, operation_rates
from mountwarden.agent.report import WriteOutcome
from mountwarden.agent.scan import MAX_REPORTED_OPERATIONS
from mountwarden.core.node.activity import Activity, ProcessSamples
from mountwarden.core.node.kubelet import KubeletPlugin
from mountwarden.core.node.scan import NodeScan, NodeVolume, OperationTotals, OptionsSource

KEY = ("uid-1", "pv-a", "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount", "0:101")


def totals(ops, rtt=0, execute=0, queue=0, errors=0):
    return OperationTotals(ops=ops, errors=errors, rtt_ms=rtt, execute_ms=execute, queue_ms=queue)


def test_rates_are_per_second_and_averages_cover_only_the_requests_in_between():
    previous = {KEY: {"READ": totals(1000, rtt=5000, execute=6000, queue=100)}}
    current = {KEY: {"READ": totals(1600, rtt=5000 + 600 * 3, execute=6000 + 600 * 4, queue=100 + 600 * 2)}}

    (rate,) = operation_rates(previous, current, 30.0).values()

    assert rate.ops_per_second == pytest.approx(20.0)
    assert (rate.avg_rtt_ms, rate.avg_execute_ms, rate.avg_queue_ms) == pytest.approx((3.0, 4.0, 2.0))


def test_no_request_in_between_is_zero_per_second_and_no_average():
    (rate,) = operation_rates({KEY: {"READ": totals(5, rtt=9)}}, {KEY: {"READ": totals(5, rtt=9)}}, 30).values()

    assert rate.ops_per_second == 0 and rate.avg_rtt_ms is None


def test_counters_going_backwards_or_new_operations_give_no_rate():
    previous = {KEY: {"READ": totals(500)}}
    current = {KEY: {"READ": totals(20), "WRITE": totals(7)}}

    assert operation_rates(previous, current, 30) == {}


def test_a_wrapped_counter_gives_no_average_but_the_rate_stays():
    previous = {KEY: {"ACCESS": OperationTotals(10, None, 20, 30, None)}}
    current = {KEY: {"ACCESS": OperationTotals(20, None, 40, 60, None)}}

    (rate,) = operation_rates(previous, current, 10).values()

    assert (rate.ops_per_second, rate.avg_rtt_ms, rate.avg_queue_ms) == (1.0, 2.0, None)


def volume(pod_uid="uid-1", name="pv-a", superblock="0:101", **operations):
    return NodeVolume(
        pod_uid=pod_uid, volume_name=name, plugin=KubeletPlugin.CSI, driver=None,
        mount_point=f"/var/lib/kubelet/pods/{pod_uid}/volumes/kubernetes.io~csi/{name}/mount",
        fstype="nfs4", source="fs:/", server="fs", export="/", superblock=superblock, effective_options=(),
        options_source=OptionsSource.MOUNTSTATS, shared_with=(), nfs_version="4.1", connections=1,
        server_mounts=1, operations=operations,
    )


def scan(*volumes):
    return NodeScan(volumes=volumes, network_mounts=(), skipped_lines=2)


def samples(metrics, name):
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name == name:
                yield sample


OWNERS = {"uid-1": ("shop", "Deployment/web")}


def test_metrics_serve_rates_labelled_by_node_namespace_workload_pod_volume_and_op():
    metrics = AgentMetrics("node-a")
    metrics.scanned(scan(volume(READ=totals(100, rtt=100))), 0.01, at=100.0, owners=OWNERS)
    assert list(samples(metrics, "mountwarden_nfs_operations_per_second")) == []

    metrics.scanned(scan(volume(READ=totals(400, rtt=700))), 0.02, at=130.0, owners=OWNERS)

    (ops,) = samples(metrics, "mountwarden_nfs_operations_per_second")
    assert ops.labels == {"node": "node-a", "namespace": "shop", "workload": "Deployment/web", "pod_uid": "uid-1",
                          "volume": "pv-a", "op": "READ"}
    assert ops.value == pytest.approx(10.0)
    (rtt,) = samples(metrics, "mountwarden_nfs_rtt_milliseconds")
    assert rtt.value == pytest.approx(2.0)
    (count,) = samples(metrics, "mountwarden_agent_scan_duration_seconds_count")
    (skipped,) = samples(metrics, "mountwarden_agent_skipped_lines")
    assert (count.value, skipped.value) == (2, 2)


def test_a_volume_gone_takes_its_series_along_and_a_remount_starts_over():
    metrics = AgentMetrics("node-a")
    metrics.scanned(scan(volume(READ=totals(100)), volume("uid-2", WRITE=totals(5))), 0.01, at=0.0)
    metrics.scanned(scan(volume(READ=totals(160)), volume("uid-2", WRITE=totals(9))), 0.01, at=30.0)
    # uid-2 left; uid-1's volume was remounted: new superblock, counters from zero.
    metrics.scanned(scan(volume(superblock="0:140", READ=totals(3))), 0.01, at=60.0)

    assert list(samples(metrics, "mountwarden_nfs_operations_per_second")) == []


def test_a_volume_mounted_twice_in_one_pod_is_served_once():
    metrics = AgentMetrics("node-a")
    twice = [volume(READ=totals(10)), volume(superblock="0:102", READ=totals(10))]
    metrics.scanned(scan(*twice), 0.01, at=0.0)
    metrics.scanned(scan(volume(READ=totals(40)), volume(superblock="0:102", READ=totals(70))), 0.01, at=10.0)

    (ops,) = samples(metrics, "mountwarden_nfs_operations_per_second")
    assert ops.value == pytest.approx(3.0)


def test_only_writes_count_as_writes():
    metrics = AgentMetrics("node-a")
    metrics.written(WriteOutcome.UNCHANGED, at_unix=10.0)
    metrics.written(WriteOutcome.PRINTED, at_unix=11.0)
    assert list(samples(metrics, "mountwarden_agent_report_writes_total")) == []

    metrics.written(WriteOutcome.HEARTBEAT, at_unix=12.0)

    (writes,) = samples(metrics, "mountwarden_agent_report_writes_total")
    (last,) = samples(metrics, "mountwarden_agent_last_successful_write_timestamp_seconds")
    assert (writes.labels, writes.value, last.value) == ({"outcome": "heartbeat"}, 1.0, 12.0)


def test_each_volume_serves_its_throughput_transport_rates_and_share_in_d():
    moving = Activity(window_seconds=300, since="scans", read_bytes_per_second=5.6e8, write_bytes_per_second=2.5e7,
                      requests_per_second=600, retransmissions_per_second=0.5, major_timeouts_per_second=0.02,
                      reconnects_per_second=0.01, connections=1, data_requests=180000, avg_queue_ms=9.0,
                      avg_rtt_ms=2.0, avg_execute_ms=11.5)
    other = (KEY[0], KEY[1], KEY[2].replace("pv-a", "pv-a-again"), "0:102")  # the same volume mounted twice
    metrics = AgentMetrics("node-a")
    metrics.scanned(scan(volume()), 0.01, at=0.0, recent={
        KEY: VolumeActivity(moving, ProcessSamples(samples=50, uninterruptible=49, processes=3)),
        other: VolumeActivity(None, ProcessSamples(samples=50, uninterruptible=0, processes=1)),
    })

    served = {name: [(sample.labels, sample.value) for sample in samples(metrics, name)] for name in (
        "mountwarden_nfs_read_bytes_per_second", "mountwarden_nfs_write_bytes_per_second",
        "mountwarden_nfs_retransmissions_per_second", "mountwarden_nfs_major_timeouts_per_second",
        "mountwarden_nfs_reconnects_per_second", "mountwarden_nfs_uninterruptible_share")}
    labels = {"node": "node-a", "namespace": "", "workload": "", "pod_uid": "uid-1", "volume": "pv-a"}  # pod unknown
    assert served == {
        "mountwarden_nfs_read_bytes_per_second": [(labels, 5.6e8)],
        "mountwarden_nfs_write_bytes_per_second": [(labels, 2.5e7)],
        "mountwarden_nfs_retransmissions_per_second": [(labels, 0.5)],
        "mountwarden_nfs_major_timeouts_per_second": [(labels, 0.02)],
        "mountwarden_nfs_reconnects_per_second": [(labels, 0.01)],
        "mountwarden_nfs_uninterruptible_share": [(labels, 0.98)],
    }


def test_a_volume_without_counters_or_samples_serves_no_activity():
    metrics = AgentMetrics("node-a")
    metrics.scanned(scan(volume()), 0.01, at=0.0, recent={KEY: VolumeActivity(None, ProcessSamples(0, 0, 0))})

    for name in ("mountwarden_nfs_read_bytes_per_second", "mountwarden_nfs_uninterruptible_share"):
        assert list(samples(metrics, name)) == []


def moving(bytes_per_second: float) -> VolumeActivity:
    activity = Activity(window_seconds=300, since="scans", read_bytes_per_second=bytes_per_second,
                        write_bytes_per_second=0.0, requests_per_second=1, retransmissions_per_second=0.0,
                        major_timeouts_per_second=0.0, reconnects_per_second=0.0, connections=1, data_requests=1,
                        avg_queue_ms=0.0, avg_rtt_ms=1.0, avg_execute_ms=1.0)
    return VolumeActivity(activity, ProcessSamples(samples=5, uninterruptible=0, processes=1))


def test_per_volume_series_stay_within_the_cap_the_busiest_served_and_the_rest_counted():
    cap, found = 3, 7
    every_operation = {f"OP{n}": totals(10 + n, rtt=5, execute=9, queue=1) for n in range(MAX_REPORTED_OPERATIONS + 4)}
    volumes = [volume(f"uid-{n}", f"pv-{n}", **every_operation) for n in range(found)]
    later = {op: totals(t.ops * 3, rtt=t.rtt_ms * 3, execute=t.execute_ms * 3, queue=t.queue_ms * 3)
             for op, t in every_operation.items()}
    recent = {(v.pod_uid, v.volume_name, v.mount_point, v.superblock): moving(1000.0 * n) for n, v in enumerate(volumes)}
    metrics = AgentMetrics("node-a", max_volumes=cap)
    metrics.scanned(scan(*volumes), 0.01, at=0.0, recent=recent)
    metrics.scanned(scan(*[volume(f"uid-{n}", f"pv-{n}", **later) for n in range(found)]), 0.01, at=10.0,
                    recent=recent, owners={f"uid-{n}": ("ns", f"StatefulSet/s{n}") for n in range(found)})

    text = text_string_to_metric_families(generate_latest(metrics.registry).decode())
    per_volume = [sample for family in text for sample in family.samples if "pod_uid" in sample.labels]
    assert len(per_volume) == cap * SERIES_PER_VOLUME  # every family filled: the bound is reached, not passed
    assert {sample.labels["pod_uid"] for sample in per_volume} == {"uid-6", "uid-5", "uid-4"}  # the busiest
    (over,) = samples(metrics, "mountwarden_agent_volumes_over_cap")
    assert over.value == found - cap


def test_under_the_cap_nothing_is_counted_over_it():
    metrics = AgentMetrics("node-a", max_volumes=3)
    metrics.scanned(scan(volume()), 0.01, at=0.0)
    (over,) = samples(metrics, "mountwarden_agent_volumes_over_cap")
    assert over.value == 0
