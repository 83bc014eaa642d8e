"""A mount's recent activity and what it means: throughput plateaus, transport trouble, stuck processes, nconnect."""

from pathlib import Path

import pytest
from tests.samples import sample_path

from mountwarden.core.node.activity import (
    GBIT,
    MIB,
    Activity,
    MountSample,
    ProcessSamples,
    Thresholds,
    activity,
    efs_file_system_limit,
    judge,
    nconnect_advice,
    process_state,
    sample_of,
    stuck_processes,
    throughput_plateau,
    transport_trouble,
)
from mountwarden.core.procfs.mountstats import parse_mountstats

TELEGRAF = "mountstats-nfs3-nfs40-nfs42-telegraf.txt"


def device(mount_point: str):
    devices = parse_mountstats(sample_path(TELEGRAF).read_text()).devices
    return next(d for d in devices if d.mount_point == mount_point)


def rates(*, bytes_per_second: float = 4.6 * GBIT, connections: int = 1, queue: float = 9.0, rtt: float = 1.5,
          seconds: float = 300.0, requests: float = 5000.0, retransmissions: float = 0.0, timeouts: float = 0.0,
          reconnects: float = 0.0) -> Activity:
    return Activity(window_seconds=seconds, since="scans", read_bytes_per_second=bytes_per_second,
                    write_bytes_per_second=0.0, requests_per_second=requests,
                    retransmissions_per_second=retransmissions, major_timeouts_per_second=timeouts,
                    reconnects_per_second=reconnects, connections=connections, data_requests=1000,
                    avg_queue_ms=queue, avg_rtt_ms=rtt, avg_execute_ms=queue + rtt + 0.5)


def test_a_sample_reads_the_counters_the_kernel_keeps():
    sample = sample_of(device("/A"), at=100.0)
    # bytes: serverreadbytes and serverwritebytes (the 5th and 6th counters).
    assert (sample.read_bytes, sample.write_bytes) == (1134399088816, 407107155723)
    assert sample.transports == 1 and sample.connects == 1
    # Every active operation of the capture was sent once more than it completed.
    assert sample.retransmissions == 21 and sample.data_ops == 600 + 700


def test_before_a_second_scan_the_rates_are_since_the_mount():
    found = activity(None, sample_of(device("/A"), at=100.0))
    assert found.since == "mount" and found.window_seconds == 1136770
    assert found.read_bytes_per_second == pytest.approx(1134399088816 / 1136770)
    assert found.reconnects_per_second == 0  # one transport, connected once


def test_between_two_scans_the_rates_are_the_differences():
    first = MountSample(0.0, 100, 0, 0, 10, 0, 0, 1, 1, 0, 0, 0, 0)
    second = MountSample(30.0, 130, 3 * 10**9, 10**9, 1010, 30, 2, 4, 1, 400, 4000, 400, 4800)
    found = activity(first, second)
    assert found.since == "scans" and found.window_seconds == 30
    assert found.read_bytes_per_second == pytest.approx(10**8)
    assert found.retransmissions_per_second == pytest.approx(1.0)
    assert found.reconnects_per_second == pytest.approx(0.1)
    assert (found.avg_queue_ms, found.avg_rtt_ms) == (10.0, 1.0)


def test_counters_that_went_backwards_give_no_rates():
    later = MountSample(0.0, 100, 5, 5, 5, 0, 0, 1, 1, 0, 0, 0, 0)
    assert activity(later, MountSample(30.0, 10, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0)) is None


def test_a_single_connection_near_the_cap_with_queueing_is_a_plateau():
    finding = throughput_plateau(rates(), Thresholds(instance_bandwidth_gbps=10.0))
    assert finding.reason == "ThroughputPlateau" and finding.severity == "warning"
    assert "One connection moved 4.60 Gbit/s on average over 300 s, 92% of the per-flow cap of 5 Gbit/s" in finding.message
    assert "waited 9.0 ms to be sent against 1.5 ms on the wire" in finding.message
    # ceil(10 / 5) = 2, with a third connection of headroom named as a choice, and benchmarked before rollout.
    assert "nconnect=2" in finding.remedy and "3 would leave a connection of headroom" in finding.remedy
    assert "Benchmark the value" in finding.remedy


@pytest.mark.parametrize("changes", [
    {"connections": 4},  # already spread
    {"bytes_per_second": 2 * GBIT},  # far from the cap
    {"queue": 1.0, "rtt": 2.0},  # the server, not the connection
    {"seconds": 30.0},  # too short to call a plateau
])
def test_no_plateau_without_all_of_its_signs(changes):
    assert throughput_plateau(rates(**changes), Thresholds()) is None


def test_the_per_flow_cap_is_the_profiles():
    assert throughput_plateau(rates(bytes_per_second=9 * GBIT), Thresholds(per_flow_cap_gbps=10.0)) is not None
    assert throughput_plateau(rates(bytes_per_second=4.6 * GBIT), Thresholds(per_flow_cap_gbps=10.0)) is None


@pytest.mark.parametrize(("instance", "file_system", "connections"), [
    (25.0, 10.2, 3),  # the FSx write-up's own figures: 10.2 Gbit/s over 5 Gbit/s flows, "three with a buffer"
    (10.0, None, 2),
    (25.0, 1500 * MIB / GBIT, 3),  # EFS Elastic's 1,500 MiB/s per client bounds it
    (100.0, 100.0, 16),  # the kernel's maximum
])
def test_nconnect_is_sized_from_the_smaller_limit_and_names_its_inputs(instance, file_system, connections):
    advice = nconnect_advice(Thresholds(instance_bandwidth_gbps=instance, file_system_limit_gbps=file_system))
    assert advice.connections == connections
    assert advice.message.startswith(f"nconnect={connections}: ceil(min of the instance bandwidth {instance:g} Gbit/s")
    assert "per-flow cap 5 Gbit/s" in advice.message and "Benchmark the value" in advice.message


def test_headroom_is_a_named_choice_never_added_to_the_number():
    advice = nconnect_advice(Thresholds(instance_bandwidth_gbps=25.0, file_system_limit_gbps=10.2))
    assert advice.connections == 3 and "4 would leave a connection of headroom" in advice.message
    assert "a choice, not a need" in advice.message


def test_nconnect_without_inputs_says_which_to_give():
    advice = nconnect_advice(Thresholds())
    assert advice.connections is None and "spec.throughput.instanceBandwidthGbps" in advice.message


def test_the_advice_never_judges_by_the_kernels_version_string():
    # Enterprise kernels carry nconnect backported (RHEL 8's 4.18): the transports in mountstats tell, not the release.
    import inspect

    assert "kernel_release" not in inspect.signature(nconnect_advice).parameters
    assert nconnect_advice(Thresholds(instance_bandwidth_gbps=10.0)).connections == 2


def test_efs_limits_per_client_come_from_the_throughput_mode():
    elastic, source = efs_file_system_limit("elastic")
    assert elastic == pytest.approx(1500 * MIB / GBIT) and "1,500 MiB/s per client" in source
    assert efs_file_system_limit("bursting")[0] == pytest.approx(500 * MIB / GBIT)
    assert efs_file_system_limit(None) == (None, "")


def test_transport_trouble_above_the_thresholds():
    finding = transport_trouble(rates(retransmissions=0.5, requests=10.0, timeouts=0.01, reconnects=0.01),
                                Thresholds())
    assert finding.reason == "TransportUnhealthy"
    assert "150 retransmissions (5.0% of requests)" in finding.message
    assert "3 major timeout(s)" in finding.message and "3 reconnects" in finding.message
    assert transport_trouble(rates(retransmissions=0.001, requests=100.0), Thresholds()) is None


def test_stuck_processes_need_enough_samples_and_a_majority_in_d():
    pod = "pod 1234"
    finding = stuck_processes(ProcessSamples(20, 19, 2), pod, Thresholds(), server_responding=False)
    assert finding.reason == "StuckOnNFS"
    assert "in 19 of 20 samples (95%) of 2 process(es)" in finding.message
    assert "did not answer the agent's probe" in finding.message
    assert stuck_processes(ProcessSamples(5, 5, 1), pod, Thresholds()) is None  # too few samples
    assert stuck_processes(ProcessSamples(20, 4, 2), pod, Thresholds()) is None


def test_judge_collects_every_finding():
    found = judge(rates(retransmissions=0.5, requests=10.0), [("pod a", ProcessSamples(20, 20, 1))],
                  Thresholds(instance_bandwidth_gbps=10.0))
    assert [f.reason for f in found] == ["ThroughputPlateau", "TransportUnhealthy", "StuckOnNFS"]


def test_process_state_follows_the_last_parenthesis():
    own = Path("/proc/self/stat").read_text()
    assert process_state(own) == "R"  # reading its own stat, the process runs
    assert process_state("42 (a) D (b)) D 1 42 42 0 -1") == "D"
    assert process_state("") is None


