"""The agent's window of samples: each volume's rates, and the states of the processes of its pods."""

from pathlib import Path

import pytest
from tests.procroot import Mount, Process, assemble_proc_root, pod_uid

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.activity import ActivityTracker, volume_key
from mountwarden.agent.scan import scan_node_report, scan_proc_root

A, B = pod_uid("a"), pod_uid("b")
#: The kubelet's systemd cgroup layout of a burstable pod's container.
CGROUP = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{}.scope\n"


def stat_in(state: str, pid: int) -> str:
    """A real /proc/<pid>/stat line (this process's own), with its pid, command and state replaced."""
    own = Path("/proc/self/stat").read_text()
    rest = own[own.rfind(")") + 1:].split()
    return " ".join([str(pid), "(python3 job)", state, *rest[1:]]) + "\n"


def process(pid: int, pod: str, state: str) -> Process:
    return Process(pid, cgroup=CGROUP.format(pod.replace("-", "_"), "c" * 64), stat=stat_in(state, pid))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tracker_on(tmp_path, processes, **kwargs):
    mounts = [Mount("pv-a", pod_uid=A, sample_mount="/A"), Mount("pv-b", pod_uid=B, sample_mount="/C")]
    root = assemble_proc_root(tmp_path / "proc", mounts, processes=processes)
    clock = Clock()
    proc = ProcRoot(root.path)
    tracker = ActivityTracker(proc, clock=clock, sleep=lambda _: None, **kwargs)
    return proc, root, tracker, clock


def by_volume(observed):
    return {key[1]: found for key, found in observed.items()}


def test_the_first_scan_gives_rates_since_the_mount_and_the_next_between_scans(tmp_path):
    proc, root, tracker, clock = tracker_on(tmp_path, [])
    scan = scan_proc_root(proc, kubelet_root=root.kubelet_root, network_fstypes=("nfs", "nfs4"))
    first = by_volume(tracker.observe(scan))
    assert first["pv-a"].activity.since == "mount"
    assert first["pv-a"].activity.read_bytes_per_second > 0
    clock.now += 30
    second = by_volume(tracker.observe(scan))
    # The same counters 30 s later: nothing moved.
    assert second["pv-a"].activity.since == "scans" and second["pv-a"].activity.window_seconds == 30
    assert second["pv-a"].activity.read_bytes_per_second == 0


def test_samples_older_than_the_window_are_dropped(tmp_path):
    proc, root, tracker, clock = tracker_on(tmp_path, [], window_seconds=60)
    scan = scan_proc_root(proc, kubelet_root=root.kubelet_root, network_fstypes=("nfs", "nfs4"))
    tracker.observe(scan)
    clock.now += 30
    tracker.observe(scan)
    clock.now += 45  # the first sample is now 75 s old
    assert by_volume(tracker.observe(scan))["pv-a"].activity.window_seconds == 45


def test_processes_in_uninterruptible_sleep_are_counted_per_pod_volume(tmp_path):
    processes = [process(4001, A, "D"), process(4002, A, "D"), process(4003, B, "S"),
                 Process(4004, cgroup="0::/system.slice/sshd.service\n", stat=stat_in("D", 4004))]
    proc, root, tracker, _ = tracker_on(tmp_path, processes, process_rounds=3)
    scan = scan_proc_root(proc, kubelet_root=root.kubelet_root, network_fstypes=("nfs", "nfs4"))
    found = by_volume(tracker.observe(scan))
    assert (found["pv-a"].processes.samples, found["pv-a"].processes.uninterruptible) == (6, 6)
    assert found["pv-a"].processes.processes == 2 and found["pv-a"].processes.share == 1.0
    assert (found["pv-b"].processes.samples, found["pv-b"].processes.uninterruptible) == (3, 0)


def test_the_report_carries_the_activity_but_a_rewrite_does_not_depend_on_it(tmp_path):
    from mountwarden.agent.report import content

    proc, root, tracker, clock = tracker_on(tmp_path, [process(4001, A, "D")], process_rounds=2)
    result = scan_node_report(proc, node_name="node-1", kubelet_root=root.kubelet_root,
                              network_fstypes=("nfs", "nfs4"), tracker=tracker)
    volume = next(v for v in result.spec.volumes if v.volume_name == "pv-a")
    assert volume.activity.since == "mount" and volume.activity.connections == 1
    assert (volume.processes.samples, volume.processes.uninterruptible, volume.processes.uninterruptible_share) == (
        2, 2, 1.0)
    clock.now += 30
    again = scan_node_report(proc, node_name="node-1", kubelet_root=root.kubelet_root,
                             network_fstypes=("nfs", "nfs4"), tracker=tracker, now=result.spec.scan_time)
    assert content(again.spec) == content(result.spec)
    assert volume_key(next(v for v in result.scan.volumes if v.volume_name == "pv-a")) in result.recent


def test_a_scan_that_must_report_at_once_samples_the_processes_once_and_sleeps_not_at_all(tmp_path):
    slept = []
    processes = [process(4001, A, "D"), process(4003, B, "S")]
    proc, root, tracker, _ = tracker_on(tmp_path, processes, process_rounds=5)
    tracker.sleep = slept.append
    scan = scan_proc_root(proc, kubelet_root=root.kubelet_root, network_fstypes=("nfs", "nfs4"))
    quick = by_volume(tracker.observe(scan, rounds=1))
    assert quick["pv-a"].processes.samples == 1 and slept == [] and tracker.paused == 0
    full = by_volume(tracker.observe(scan))
    assert full["pv-a"].processes.samples == 1 + 5  # merged over the window
    assert len(slept) == 4 and tracker.paused == pytest.approx(4 * 0.2)


def test_a_scan_whose_pods_have_no_process_to_sample_does_not_wait_between_rounds(tmp_path):
    slept = []
    proc, root, tracker, _ = tracker_on(tmp_path, [], process_rounds=5)  # the pods' volumes, none of their processes
    tracker.sleep = slept.append
    scan = scan_proc_root(proc, kubelet_root=root.kubelet_root, network_fstypes=("nfs", "nfs4"))
    found = by_volume(tracker.observe(scan))
    assert found["pv-a"].processes.samples == 0 and slept == [] and tracker.paused == 0
