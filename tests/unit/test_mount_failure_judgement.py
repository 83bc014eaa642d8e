"""The judgement of broken mounts, pure: what each fact the agent (or the operator) sees makes of a pod or a node.

The kernel produces every one of these for real in tests/kernel/test_kernel_mount_failures.py,
tests/kernel/test_server_not_responding.py and tests/realnode/test_real_node_mount_failures.py; here each rule is
held to its edges.
"""

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mountwarden.adapters.pods import PodPlacement, PodPlacements
from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.activity import VolumeActivity
from mountwarden.agent.failures import mount_helpers
from mountwarden.agent.probe import _answer, _responding
from mountwarden.agent.report import content
from mountwarden.agent.scan import mounted_volume
from mountwarden.api.nodemountreport import ITEMS_MAX, NodeFailure, NodeMountReportSpec
from mountwarden.core.findings import Reason, Severity
from mountwarden.core.node.activity import StuckProcess
from mountwarden.core.node.failures import (
    REMEDIES,
    DeletingPod,
    MountHelper,
    NodeFacts,
    ProbeAnswer,
    ServerLog,
    node_failures,
    orphaned_mounts,
    remedy,
    runbook_form,
    servers_not_responding,
    stale_handles,
    stuck_helpers,
    stuck_terminating,
    tunnels_down,
)
from mountwarden.core.node.kubelet import KubeletPlugin
from mountwarden.core.node.report import NodeFinding, NodeReport, ReportedMount, of_own_pods
from mountwarden.core.node.scan import NodeVolume, OptionsSource
from mountwarden.core.procfs.kmsg import ServerWord, parse_kmsg_record, server_word
from mountwarden.core.procfs.sockets import Listener, parse_listeners
from mountwarden.core.remediation import StalePod, next_eviction
from mountwarden.handlers.failures import FAILURE_POLICY, MountFailures
from mountwarden.handlers.findings import with_remedy

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
EFS = ("vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport")


def volume(name: str, *, pod: str | None = "uid-a", server: str = "10.0.0.5", options=EFS, source: str | None = None,
           superblock: str = "0:50") -> NodeVolume:
    return NodeVolume(
        pod_uid=pod, volume_name=name, plugin=KubeletPlugin.NFS, driver=None,
        mount_point=f"/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~nfs/{name}", fstype="nfs4",
        source=source or f"{server}:/exports/{name}", server=server, export=f"/exports/{name}",
        superblock=superblock, effective_options=tuple(options), options_source=OptionsSource.MOUNTSTATS,
        shared_with=(), nfs_version="4.1", connections=1, server_mounts=1)


def reasons(found: list[NodeFinding]) -> list[str]:
    return [str(f.finding.reason) for f in found]


# -- the kernel's words -----------------------------------------------------------------------------------


def test_kernel_log_records_and_the_nfs_clients_words_about_its_servers():
    record = parse_kmsg_record("6,1234,187700320,-;nfs: server 10.77.1.1 OK\n SUBSYSTEM=nfs\n")
    assert record is not None and (record.priority, record.sequence, record.seconds) == (6, 1234, 187.70032)
    assert record.message == "nfs: server 10.77.1.1 OK"
    assert server_word(record.message) == ("10.77.1.1", ServerWord.OK)
    assert server_word("nfs: server fs-1.efs.eu-west-1.amazonaws.com not responding, still trying") == (
        "fs-1.efs.eu-west-1.amazonaws.com", ServerWord.STILL_TRYING)
    assert server_word("nfs: server 10.77.2.1 not responding, timed out") == ("10.77.2.1", ServerWord.TIMED_OUT)
    assert server_word("NFSD: starting 10-second grace period (net f0000000)") is None
    assert parse_kmsg_record("no record here") is None


def test_a_server_is_said_down_from_its_first_not_responding_line_until_an_ok():
    log = ServerLog("10.77.1.1")
    t = [NOW + timedelta(seconds=s) for s in range(4)]
    log = log.observe(ServerWord.TIMED_OUT, t[0]).observe(ServerWord.STILL_TRYING, t[1])
    assert log.says_down and log.not_responding_since == t[0] and log.last_word is ServerWord.STILL_TRYING
    log = log.observe(ServerWord.OK, t[2])
    assert not log.says_down and log.not_responding_since is None
    assert log.observe(ServerWord.TIMED_OUT, t[3]).not_responding_since == t[3]


def test_the_hosts_listeners_from_net_tcp_and_tcp6():
    tcp = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
           "   0: 00000000:8DFF 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 12782 1 0 100 0 0 10 0\n"
           "   1: 0100007F:4E51 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 15226 1 0 100 0 0 10 0\n"
           "   2: 0100007F:4E51 0100007F:0301 01 00000000:00000000 00:00000000 00000000  0 0 15227 1 0 100 0 0 10 0\n"
           "   garbage\n")
    listeners, skipped = parse_listeners(tcp)
    assert listeners == {Listener("0.0.0.0", 36351), Listener("127.0.0.1", 20049)} and skipped == 1
    tcp6 = ("  sl  local_address                         remote_address                        st ...\n"
            "   0: 00000000000000000000000001000000:0801 00000000000000000000000000000000:0000 0A 0 0 0 0 0 0 1\n")
    assert parse_listeners(tcp6)[0] == {Listener("::1", 2049)}


# -- what the agent judges ------------------------------------------------------------------------------


def test_only_a_volume_whose_probe_got_estale_has_a_stale_handle_on_its_pod():
    stale, fine = volume("data"), volume("logs", pod="uid-b")
    facts = NodeFacts([stale, fine], answers={stale.mount_point: ProbeAnswer.STALE,
                                              fine.mount_point: ProbeAnswer.ANSWERED}, node="n1")
    (found,) = stale_handles(facts)
    assert found.pod_uid == "uid-a" and found.finding.severity is Severity.ERROR
    assert "ESTALE" in found.finding.message and "/exports/data" in found.finding.message
    assert found.finding.evidence["mountPoint"] == stale.mount_point and found.finding.remedy == remedy(
        Reason.STALE_FILE_HANDLE)
    assert node_failures(facts) == [found]  # a server that answers ESTALE is answering


def test_a_tunnel_mount_with_nothing_listening_on_its_port_is_down():
    tunnel = volume("efs", server="127.0.0.1", options=(*EFS, "port=20049"), source="127.0.0.1:/")
    plain_loopback = volume("local", pod="uid-b", server="127.0.0.1", options=(*EFS, "port=2049"))
    facts = NodeFacts([tunnel, plain_loopback], listeners=frozenset({Listener("0.0.0.0", 111)}))
    (found,) = tunnels_down(facts)
    assert found.pod_uid == "uid-a" and "127.0.0.1:20049" in found.finding.message
    assert "127.0.0.1:20049 again" in found.finding.remedy
    assert tunnels_down(NodeFacts([tunnel], listeners=frozenset({Listener("127.0.0.1", 20049)}))) == []
    assert tunnels_down(NodeFacts([tunnel], listeners=None)) == []  # unreadable: nothing said


def test_a_server_whose_hard_mounts_wait_is_an_error_naming_them_and_their_stuck_processes():
    hard = volume("data")
    facts = NodeFacts([hard], answers={hard.mount_point: ProbeAnswer.NO_ANSWER}, probe_timeout=5,
                      stuck={hard.mount_point: (StuckProcess(7, "cat", "rpc_wait_bit_killable"),)}, node="n1")
    (found,) = servers_not_responding(facts)
    message = found.finding.message
    assert found.finding.severity is Severity.ERROR and found.pods == ("uid-a",) and found.pod_uid is None
    assert "the agent's statvfs() probe got no answer within 5 s" in message
    assert "Hard mounts wait for it, their data safe" in message
    assert "(1 process(es) in D)" in message and "Soft mounts" not in message
    assert found.finding.evidence["server"] == "10.0.0.5" and found.finding.evidence["hardMounts"] == "1"


def test_a_server_asked_by_the_null_call_is_said_down_naming_that_call():
    hard = volume("data")
    facts = NodeFacts([hard], answers={hard.mount_point: ProbeAnswer.NO_ANSWER}, probe_timeout=5,
                      probe_name="RPC NULL call")
    (found,) = servers_not_responding(facts)
    assert "the agent's RPC NULL call got no answer within 5 s" in found.finding.message


def test_a_server_whose_soft_mounts_fail_is_critical_and_says_their_data_is_at_risk():
    soft = volume("scratch", options=("vers=4.1", "soft", "timeo=10", "retrans=1"))
    log = ServerLog("10.0.0.5").observe(ServerWord.TIMED_OUT, NOW)
    facts = NodeFacts([soft], answers={soft.mount_point: ProbeAnswer.FAILED}, kernel_log={"10.0.0.5": log},
                      major_timeouts={soft.mount_point: (3, 300.0)})
    (found,) = servers_not_responding(facts)
    message = found.finding.message
    assert found.finding.severity is Severity.CRITICAL
    assert "Soft mounts return errors, their data at risk" in message and "failed with EIO" in message
    assert "the kernel logged 'server 10.0.0.5 not responding, timed out' since 2026-05-04 12:00:00Z" in message
    assert "3 major timeout(s)" in message


def test_the_probe_decides_and_without_it_the_kernel_log_or_mountstats_do():
    one = volume("data")
    down = ServerLog("10.0.0.5").observe(ServerWord.STILL_TRYING, NOW)
    back = down.observe(ServerWord.OK, NOW + timedelta(seconds=1))
    # The probe answered: a "not responding" line of an earlier blip is history.
    assert servers_not_responding(NodeFacts([one], answers={one.mount_point: ProbeAnswer.ANSWERED},
                                            kernel_log={"10.0.0.5": down})) == []
    # No probe: the kernel's own word, until it says OK; or timeouts counted in the window.
    assert servers_not_responding(NodeFacts([one], kernel_log={"10.0.0.5": down}))
    assert servers_not_responding(NodeFacts([one], kernel_log={"10.0.0.5": back})) == []
    assert servers_not_responding(NodeFacts([one], major_timeouts={one.mount_point: (1, 60.0)}))
    assert servers_not_responding(NodeFacts([one])) == []


def test_a_dead_tunnel_is_said_once_as_the_tunnel_not_as_its_server():
    tunnel = volume("efs", server="127.0.0.1", options=(*EFS, "port=20049"))
    facts = NodeFacts([tunnel], answers={tunnel.mount_point: ProbeAnswer.NO_ANSWER}, listeners=frozenset())
    assert reasons(node_failures(facts)) == ["TLSTunnelDown"]
    facts = NodeFacts([tunnel], answers={tunnel.mount_point: ProbeAnswer.NO_ANSWER},
                      listeners=frozenset({Listener("127.0.0.1", 20049)}))
    (found,) = node_failures(facts)  # the tunnel listens but forwards nothing: what is behind it does not answer
    assert found.finding.reason is Reason.SERVER_NOT_RESPONDING and found.finding.evidence["server"] == "127.0.0.1:20049"


def helper(pid: int, age: float, *, command="mount.nfs", source: str | None = "10.77.3.1:/srv/export",
           target="/mnt/x", state="D") -> MountHelper:
    return MountHelper(pid, command, state, NOW - timedelta(seconds=age), age, source, target,
                       "rpc_wait_bit_killable" if state == "D" else None)


def test_mount_helpers_past_their_time_are_stuck_per_server_and_named():
    facts = NodeFacts([], helpers=[helper(435, 200), helper(436, 30), helper(440, 500, command="umount.nfs4",
                                                                            source=None, target="/mnt/y")],
                      helper_stuck_seconds=180)
    found = stuck_helpers(facts, {"/mnt/y": "10.0.0.9"})
    assert [f.finding.evidence["server"] for f in found] == ["10.0.0.9", "10.77.3.1"]
    mount = found[1].finding
    assert "mount.nfs (pid 435) of 10.77.3.1:/srv/export on /mnt/x" in mount.message and "436" not in mount.message
    assert "uninterruptible sleep (D, waiting in rpc_wait_bit_killable)" in mount.message
    assert "kill 435" in mount.remedy and mount.severity is Severity.WARNING


def test_mount_helpers_are_read_from_the_proc_root(tmp_path):
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "uptime").write_text("1000.00 1500.00\n")
    ticks = os.sysconf("SC_CLK_TCK")
    for pid, comm, state, started, argv in (
            (435, "mount.nfs", "D", 700, ["/sbin/mount.nfs", "10.77.3.1:/srv/export", "/mnt/x", "-o", "rw,hard"]),
            (440, "umount.nfs4", "S", 900, ["/sbin/umount.nfs4", "/mnt/y", "-f"]),
            (450, "sleep", "S", 10, ["sleep", "100"])):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(
            f"{pid} ({comm}) {state} " + " ".join(["1"] * 18 + [str(started * ticks)]) + " 0 0\n")
        (proc / str(pid) / "cmdline").write_text("\0".join(argv) + "\0")
        (proc / str(pid) / "wchan").write_text("rpc_wait_bit_killable")
    found = {h.pid: h for h in mount_helpers(ProcRoot(proc), NOW)}
    assert set(found) == {435, 440}
    assert (found[435].source, found[435].mount_point, found[435].state) == ("10.77.3.1:/srv/export", "/mnt/x", "D")
    assert found[435].age_seconds == pytest.approx(300) and found[435].wchan == "rpc_wait_bit_killable"
    assert (found[440].source, found[440].mount_point, found[440].wchan) == (None, "/mnt/y", None)


# -- what the operator adds ------------------------------------------------------------------------------


def mount(name: str, pod: str, **fields) -> ReportedMount:
    return ReportedMount(pod_uid=pod, volume_name=name, mount_point=f"/var/lib/kubelet/pods/{pod}/volumes/x/{name}",
                         superblock="0:50", effective_options=EFS, server="10.0.0.5", **fields)


def report(*mounts: ReportedMount, findings=(), at: datetime = NOW) -> NodeReport:
    return NodeReport("n1", at, tuple(mounts), findings=tuple(findings))


def test_a_pod_past_its_deadline_with_its_volume_stuck_is_stuck_terminating():
    stuck = (StuckProcess(41, "sh", "folio_wait_bit_common"),)
    deleting = {"uid-a": DeletingPod("uid-a", "ns", "app", NOW - timedelta(minutes=5))}
    after = timedelta(minutes=3)
    (found,) = stuck_terminating(report(mount("data", "uid-a", stuck_processes=stuck)), deleting, now=NOW, after=after)
    message = found.finding.message
    assert found.pod_uid == "uid-a" and found.finding.reason is Reason.STUCK_TERMINATING
    assert "pod ns/app, deleted to be gone by 2026-05-04 11:55:00Z, still has its volume data mounted" in message
    assert "pid 41 (sh, in D in folio_wait_bit_common: not killable)" in message
    assert "umount -f /var/lib/kubelet/pods/uid-a/volumes/x/data" in found.finding.remedy
    # Not yet past the deadline and the margin; no NFS trouble; a report from before the deadline: nothing.
    assert stuck_terminating(report(mount("data", "uid-a", stuck_processes=stuck)), deleting, now=NOW,
                             after=timedelta(minutes=6)) == []
    assert stuck_terminating(report(mount("data", "uid-a")), deleting, now=NOW, after=after) == []
    assert stuck_terminating(report(mount("data", "uid-a", stuck_processes=stuck), at=NOW - timedelta(minutes=6)),
                             deleting, now=NOW, after=after) == []


def test_a_dead_server_or_a_node_failure_on_the_mount_is_evidence_enough():
    deleting = {"uid-a": DeletingPod("uid-a", "ns", "app", NOW - timedelta(minutes=5))}
    dead = mount("data", "uid-a", server_responding=False)
    (found,) = stuck_terminating(report(dead), deleting, now=NOW, after=timedelta(minutes=1))
    assert "its server 10.0.0.5 does not answer the agent's probe" in found.finding.message
    server_down = NodeFinding(servers_not_responding(NodeFacts(
        [volume("data")], answers={volume("data").mount_point: ProbeAnswer.NO_ANSWER}))[0].finding)
    (found,) = stuck_terminating(report(mount("data", "uid-a"), findings=[server_down]), deleting, now=NOW,
                                 after=timedelta(minutes=1))
    assert "ServerNotResponding (NFS server 10.0.0.5 does not answer)" in found.finding.message


def test_a_mount_whose_pod_is_gone_is_orphaned_once_it_stays_so():
    orphan = mount("data", "uid-gone")
    since = {orphan.mount_point: NOW - timedelta(minutes=4)}
    (found,) = orphaned_mounts(report(orphan), since, now=NOW, after=timedelta(minutes=3))
    assert found.pod_uid is None and found.finding.severity is Severity.WARNING
    assert "its pod (UID uid-gone) no longer exists" in found.finding.message
    assert f"On node n1: umount {orphan.mount_point} (the kubelet" in found.finding.remedy
    assert orphaned_mounts(report(orphan), since, now=NOW, after=timedelta(minutes=5)) == []
    assert orphaned_mounts(report(orphan), {}, now=NOW, after=timedelta(0)) == []


def test_a_node_names_in_its_failures_only_its_own_pods():
    on_pod = NodeFinding(stale_handles(NodeFacts([volume("a", pod="mine")], answers={
        volume("a", pod="mine").mount_point: ProbeAnswer.STALE}))[0].finding, "mine")
    elsewhere = NodeFinding(on_pod.finding, "theirs")
    on_node = NodeFinding(on_pod.finding, None, ("mine", "theirs", "unknown"))
    own, foreign = of_own_pods(report(findings=[on_pod, elsewhere, on_node]),
                               {"mine": "n1", "theirs": "n2"}.get)
    assert [f.pod_uid for f in own.findings] == ["mine", None] and own.findings[1].pods == ("mine",)
    assert [entry.pod_uid for entry in foreign] == ["theirs"]


# -- the report and the remedies -----------------------------------------------------------------------


def test_a_failure_rewrites_the_report_when_it_comes_or_goes_not_when_its_message_says_more():
    found = NodeFailure.of(stale_handles(NodeFacts([volume("a")], answers={
        volume("a").mount_point: ProbeAnswer.STALE}))[0])
    spec = NodeMountReportSpec(node_name="n1", scan_time=NOW, agent_version="t", network_fstypes=["nfs4"],
                               failures=[found])
    reworded = spec.model_copy(update={"failures": [found.model_copy(update={"message": "more"})]})
    assert content(spec) == content(reworded)
    assert content(spec) != content(spec.model_copy(update={"failures": []}))
    assert NodeFailure.of(found.to_finding()) == found  # the wire and back


def test_every_remedy_is_in_the_runbook_word_for_word():
    runbook = " ".join((ROOT / "docs" / "runbook.md").read_text().split())
    missing = [reason for reason in REMEDIES if runbook_form(reason) not in runbook]
    assert not missing, f"docs/runbook.md does not give these remedies word for word: {missing}"


def test_an_events_text_keeps_the_remedy_whole_and_cuts_the_message():
    said = with_remedy("m" * 2000, "do this", limit=100)
    assert len(said) == 100 and said.endswith("… do this")
    assert with_remedy("short", "do this") == "short do this"


def test_the_probe_tells_an_answer_from_a_stale_handle_from_a_soft_mount_giving_up():
    assert [_answer(code) for code in (0, 116, 5, 110, 2)] == [
        ProbeAnswer.ANSWERED, ProbeAnswer.STALE, ProbeAnswer.FAILED, ProbeAnswer.FAILED, ProbeAnswer.UNKNOWN]
    assert _responding([ProbeAnswer.STALE, ProbeAnswer.NO_ANSWER]) is True  # ESTALE is the server's answer
    assert _responding([ProbeAnswer.FAILED]) is False and _responding([ProbeAnswer.UNKNOWN]) is None


# -- the one remedy applied unattended -----------------------------------------------------------------------


def stale_pod(name: str, *, controlled: bool = True) -> StalePod:
    return StalePod(f"uid-{name}", "ns", name, "pv-1", "n1", controlled)


def test_stale_pods_are_evicted_one_at_a_time_each_at_most_once_a_window():
    window = timedelta(hours=1)
    a, b = stale_pod("a"), stale_pod("b")
    assert next_eviction([b, a], {}, set(), now=NOW, window=window).evict == a
    # a evicted and still there (terminating): nothing more until it is gone.
    waiting = next_eviction([a, b], {a.uid: NOW}, {a.uid}, now=NOW, window=window)
    assert waiting.evict is None and "one pod at a time" in waiting.waiting
    # a gone: b next; a again (a pod that did not go away) only once the window has passed.
    assert next_eviction([a, b], {a.uid: NOW}, set(), now=NOW, window=window).evict == b
    assert next_eviction([a], {a.uid: NOW}, set(), now=NOW + timedelta(minutes=59), window=window).evict is None
    assert next_eviction([a], {a.uid: NOW}, {a.uid}, now=NOW + window, window=window).evict == a


def test_a_pod_no_controller_recreates_is_never_evicted():
    bare = stale_pod("bare", controlled=False)
    decision = next_eviction([bare], {}, set(), now=NOW, window=timedelta(hours=1))
    assert decision.evict is None and decision.uncontrolled == (bare,)


def test_remedies_name_their_placeholders_the_way_the_runbook_writes_them():
    assert REMEDIES, "no remedy is written"
    for reason in REMEDIES:
        assert not re.search(r"\{\w+\}", runbook_form(reason)), reason


# -- the operator's view: pods named, findings where they belong -----------------------------------------------


def placements(*pods) -> PodPlacements:
    known = PodPlacements()
    known.load(pods)
    known.synced.set()
    return known


def test_the_operator_names_the_pods_puts_each_finding_on_its_object_and_waits_out_orphans():
    stale = NodeFinding(stale_handles(NodeFacts([volume("data", pod="uid-a")], answers={
        volume("data", pod="uid-a").mount_point: ProbeAnswer.STALE}))[0].finding, "uid-a")
    down = NodeFinding(servers_not_responding(NodeFacts(
        [volume("data", pod="uid-a")], answers={volume("data", pod="uid-a").mount_point: ProbeAnswer.NO_ANSWER}))[
        0].finding, None, ("uid-a",))
    deleting = PodPlacement("uid-b", "ns", "leaving", "n1", ("c",), (NOW - timedelta(minutes=10)).isoformat())
    pods = placements(PodPlacement("uid-a", "ns", "app", "n1", ("c",)), deleting)
    failures = MountFailures()
    stuck = (StuckProcess(9, "sh", "folio_wait_bit_common"),)
    failures.follow("n1", report(mount("data", "uid-a"), mount("logs", "uid-b", stuck_processes=stuck),
                                 mount("old", "uid-gone"), findings=[stale, down]))
    first = failures.judge("n1", pods, now=NOW, after=timedelta(minutes=3), stale_after=timedelta(minutes=15))
    by_reason = {f.reason: f for f in first}
    assert set(by_reason) == {Reason.STALE_FILE_HANDLE, Reason.SERVER_NOT_RESPONDING, Reason.STUCK_TERMINATING}
    on_pod = by_reason[Reason.STALE_FILE_HANDLE]
    assert (on_pod.subject.kind, on_pod.subject.name, on_pod.profile) == ("Pod", "app", FAILURE_POLICY)
    assert "volume data of pod ns/app" in on_pod.message and on_pod.message.endswith(on_pod.remedy)
    on_node = by_reason[Reason.SERVER_NOT_RESPONDING]
    assert (on_node.subject.kind, on_node.subject.name) == ("Node", "n1") and "Pods: ns/app." in on_node.message
    assert by_reason[Reason.STUCK_TERMINATING].subject.name == "leaving"
    # The mount of a pod the cluster does not know is an orphan only once it stays so for ``after``.
    later = failures.judge("n1", pods, now=NOW + timedelta(minutes=4), after=timedelta(minutes=3),
                           stale_after=timedelta(minutes=15))
    (orphan,) = [f for f in later if f.reason is Reason.ORPHANED_MOUNT]
    assert orphan.subject.kind == "Node" and orphan.evidence["podUid"] == "uid-gone"
    assert failures.found(Reason.STALE_FILE_HANDLE) == [f for f in later if f.reason is Reason.STALE_FILE_HANDLE]
    # A report too old proves nothing; a report gone takes its failures along.
    assert failures.judge("n1", pods, now=NOW + timedelta(hours=1), after=timedelta(minutes=3),
                          stale_after=timedelta(minutes=15)) == []
    failures.follow("n1", None)
    assert failures.judge("n1", pods, now=NOW, after=timedelta(0), stale_after=timedelta(minutes=15)) == []
    assert failures.nodes == []


def test_a_fork_bomb_in_d_state_keeps_the_report_within_the_crds_bounds():
    stuck = tuple(StuckProcess(pid, "sh", "folio_wait_bit_common") for pid in range(ITEMS_MAX + 500))
    reported = mounted_volume(volume("data"), recent=VolumeActivity(activity=None, processes=None, stuck=stuck))
    assert len(reported.stuck_processes) == ITEMS_MAX
