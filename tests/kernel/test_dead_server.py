"""A server that stops answering (nfsd stopped) while the agent scans.

In a VM of its own (the server is stopped on purpose): two pod volumes, one hard (the AWS
options) with a process holding a SQLite lock on it and another holding an idle database
open (no lock: only the header scan finds it), one soft. With nfsd's threads at 0 the
agent's one-shot scan must still finish, having waited for the servers one probe timeout
and for nothing else (its own account of its time says so), say that the hard mount's
server does not answer, and keep everything else it found; and the SQLite scan's stat()
and header reads, repeated, never pile threads up behind the server.

A process of the pod (in its cgroup, as the kubelet lays them out) keeps reading the hard
volume: once the server is gone it sleeps uninterruptibly (D) in the kernel, and the agent's
samples of /proc/<pid>/stat must say so for that volume, which the operator's check turns
into a StuckOnNFS finding.

Whether a scan could hang for good never depended on luck, and the test forces what it
depends on: a process keeps unwritten (dirty) pages on each hard mount when the server
stops, since a plain stat() of such a file waits uninterruptibly for their writeback
(nfs_getattr), and the repeated scans run once on a mount whose attributes stay cached
(actimeo=3600) and once on one where they are never cached (actimeo=0). A scan that
does not end is reported with the kernel stack of each of its tasks (labd).
"""

import json
import re
import time
from collections.abc import Iterator

import pytest
from tests.kernel.conftest import boot, start_and_wait
from tests.kernel.test_sqlite import HOLDER

from mountwarden.agent.sqlitescan import STAT_TIMEOUT_SECONDS
from mountwarden.api.nodemountreport import read_node_report
from mountwarden.core.node.activity import Thresholds
from mountwarden.core.node.check import check_volume
from mountwarden.lab.experiments import EFS_LIKE, Lab
from mountwarden.lab.livescan import TRY_POD_UID
from mountwarden.lab.livescan import mount_point as try_mount_point
from mountwarden.lab.vm import LabVM

PROBE_TIMEOUT = 5
#: What the scan's time off the CPU outside its waits may vary by, between the healthy and the dead scan: less
#: than the soft mount's server takes to give up (about 3 s), far more than the 0.03-0.09 s measured here, idle
#: and under load.
OTHER_OFF_CPU_SLACK = 2.0
#: The agent's --verbose account of a scan's time (agent/scan.py, ScanResult.account).
SCAN_ACCOUNT = re.compile(r"scan time (?P<duration>[\d.]+) s: (?P<cpu>[\d.]+) s on CPU, (?P<waited>[\d.]+) s waiting "
                          r"for servers that did not answer, (?P<paused>[\d.]+) s between process samples, "
                          r"(?P<other>[\d.]+) s otherwise off CPU")
PROCESS_SAMPLES = 20
#: The pod's cgroup, as the kubelet's systemd driver names it.
POD_SCOPE = (f"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
             f"{TRY_POD_UID.replace('-', '_')}.slice/cri-containerd-{'d' * 64}.scope")
#: Keeps a file of the hard volume open and asks the server about it twice a second (fstat once the cached
#: attributes expire, a read once the cache is dropped): blocked in the kernel once the server is gone.
READER = """
import os, sys, time
path = os.path.join(sys.argv[1], "stuck-reader")
with open(path, "w") as handle:
    handle.write("x" * 4096)
fd = os.open(path, os.O_RDONLY)
print("reading", flush=True)
while True:
    os.fstat(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.pread(fd, 4096, 0)
    os.stat(path)
    time.sleep(0.5)
"""
#: A database created, then held open with no transaction: no lock, so only its header says SQLite.
IDLE_OPENER = """
import sqlite3, sys, time
path = sys.argv[1] + "/idle.db"
sqlite3.connect(path).execute("create table if not exists t(x)").connection.commit()
held = open(path, "rb")
print("open", flush=True)
time.sleep(3600)
"""
#: Writes 64 KiB and keeps the file open without fsync(): its pages are still dirty (or under writeback) when
#: the server stops, which is what makes a plain stat() of it wait for good.
DIRTY_WRITER = """
import sys, time
handle = open(sys.argv[1] + "/dirty.bin", "wb")
handle.write(b"d" * 65536)
print("dirty", flush=True)
time.sleep(3600)
"""
#: Three SQLite scans of one mount (argv[1]) with the header scan on, in one process as the agent runs them: how
#: long each took, how many calls were left stuck and how many threads the process had after each. Then the
#: process exits: a thread left stuck in the kernel must not keep it from exiting.
REPEATED_SCANS = """
import json, sys, threading, time
from mountwarden.adapters import bounded
from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.scan import scan_proc_root
from mountwarden.agent.sqlitescan import scan_sqlite
waits = []  # each bounded call that was waited for until its timeout: a wait on a server that did not answer
answer = bounded.Pending.result
def counted(self, timeout):
    result = answer(self, timeout)
    if result.outcome is bounded.Outcome.TIMED_OUT:
        waits.append(timeout)
    return result
bounded.Pending.result = counted
proc = ProcRoot("/proc")
node = scan_proc_root(proc, kubelet_root="/var/lib/kubelet", network_fstypes=("nfs", "nfs4"))
mounts = [mount.network_mount for mount in node.network_mounts if mount.mount_point == sys.argv[1]]
assert mounts, sys.argv[1]
runs = []
for _ in range(3):
    started, waited = time.monotonic(), len(waits)
    scan = scan_sqlite(proc, mounts, header_scan=True)
    runs.append({"seconds": time.monotonic() - started, "timeouts": len(waits) - waited,
                 "stuck": proc.calls.stuck, "threads": threading.active_count(),
                 "stalled": proc.counters.stalled, "paths": sorted(f.path for f in scan.findings),
                 "headers": scan.counters.headers_read})
print(json.dumps(runs), flush=True)
"""
#: Long enough for three scans that each wait one STAT_TIMEOUT_SECONDS under TCG, far below pytest's timeout:
#: a scan that does not end fails with the kernel stacks of its tasks, not with pytest's timeout.
SCANS_TIMEOUT = 240
#: The repeated scans' mounts, by the state of their attribute caches while the server is away.
ATTRIBUTE_STATES = {"cached": "actimeo=3600", "expired": "actimeo=0"}


@pytest.fixture(scope="module")
def stopped(lab_image) -> Iterator[tuple[Lab, dict]]:
    vm = boot(lab_image)
    try:
        lab = Lab.start(vm)
        hard = lab.mount(EFS_LIKE, at=try_mount_point(0))
        soft = lab.mount("vers=4.1,soft,timeo=10,retrans=1,nosharecache", at=try_mount_point(1))
        by_attributes = {state: lab.mount(f"{EFS_LIKE},{option}", at=try_mount_point(2 + index))
                         for index, (state, option) in enumerate(ATTRIBUTE_STATES.items())}
        # Every mount is of the same export: each one's processes work in a directory of their own.
        directories = {"hard": hard, **{state: f"{point}/{state}" for state, point in by_attributes.items()}}
        for name, directory in directories.items():
            start_and_wait(vm, HOLDER, directory, f"/tmp/{name}-holder.log", "holding")
            start_and_wait(vm, IDLE_OPENER, directory, f"/tmp/{name}-idle.log", "open")
        deadline = time.monotonic() + 180
        vm.run(f"mkdir -p {POD_SCOPE} && sh -c 'echo $$ > {POD_SCOPE}/cgroup.procs && exec python3 -c \"$0\" {hard}' "
               f"'{READER}' > /tmp/reader.log 2>&1 &")
        while "reading" not in vm.run("cat /tmp/reader.log", check=False).stdout:
            assert time.monotonic() < deadline, vm.run("cat /tmp/reader.log", check=False).stdout
            time.sleep(1)
        before = vm.mountwarden("agent", "--once", "--dry-run", "--verbose", "--node-name", "lab", "--proc-root",
                                "/proc", "--probe-timeout", str(PROBE_TIMEOUT), "--process-samples",
                                str(PROCESS_SAMPLES))
        healthy_scans = {state: vm.python(REPEATED_SCANS, point, timeout=SCANS_TIMEOUT).json()
                         for state, point in by_attributes.items()}
        # Last before the stop, so that nothing has written these pages back yet when the server goes.
        for name, directory in directories.items():
            start_and_wait(vm, DIRTY_WRITER, directory, f"/tmp/{name}-dirty.log", "dirty")
        vm.run("rpc.nfsd 0")  # no threads: the server accepts nothing more
        yield lab, {"hard": hard, "soft": soft, "mount_points": by_attributes, "directories": directories,
                    "before": before.json(), "before_stderr": before.stderr, "healthy_scans": healthy_scans}
    finally:
        vm.stop()


@pytest.fixture(scope="module")
def scan_while_stopped(stopped):
    lab, _ = stopped
    vm: LabVM = lab.vm
    # Once its cached attributes expire, the reader's next fstat() asks the server and waits (D): then scan.
    deadline = time.monotonic() + 180
    while vm.run(f"for pid in $(cat {POD_SCOPE}/cgroup.procs); do cut -d' ' -f3 /proc/$pid/stat; done",
                 check=False).stdout.split() != ["D"]:
        assert time.monotonic() < deadline, "the pod's reader never blocked on the stopped server"
        time.sleep(0.5)
    result = vm.mountwarden("agent", "--once", "--dry-run", "--verbose", "--node-name", "lab", "--proc-root", "/proc",
                            "--probe-timeout", str(PROBE_TIMEOUT), "--process-samples", str(PROCESS_SAMPLES),
                            timeout=600, check=False)
    return result


def scan_account(stderr: str) -> dict[str, float]:
    (account,) = [match.groupdict() for match in SCAN_ACCOUNT.finditer(stderr)] or [None]
    assert account is not None, stderr[-3000:]
    return {part: float(seconds) for part, seconds in account.items()}


def test_the_scan_finishes_and_succeeds(scan_while_stopped):
    assert scan_while_stopped.ok, scan_while_stopped.stderr[-6000:]


def test_the_scan_waits_for_the_dead_servers_once_and_for_nothing_else(scan_while_stopped, stopped):
    # The probes of every superblock are waited for together, at most PROBE_TIMEOUT; nothing else waits on a
    # server. Judged from the agent's own account of its scan's time, not from its length: both scans' lengths are
    # mostly a Python start under TCG, which the host's load stretches (one CI run: 70.5 s against 27.6 s healthy).
    _, mounts = stopped
    healthy, dead = scan_account(mounts["before_stderr"]), scan_account(scan_while_stopped.stderr)
    assert healthy["waited"] == 0.0, healthy
    # One timeout for every probe; another bounded call waited for in vain would add its own (STAT_TIMEOUT_SECONDS).
    assert PROBE_TIMEOUT <= dead["waited"] < PROBE_TIMEOUT + 1, (dead, healthy, STAT_TIMEOUT_SECONDS)
    # A call outside the bounded ones that waited on a server would be time off the CPU the account does not
    # explain: the soft mount's server gives up after about 3 s (timeo=10,retrans=1), a hard one never.
    assert dead["other"] <= healthy["other"] + OTHER_OFF_CPU_SLACK, (dead, healthy)


def test_the_hard_mounts_server_is_reported_unresponsive(scan_while_stopped, stopped):
    _, mounts = stopped
    volumes = {v["mountPoint"]: v for v in scan_while_stopped.json()["spec"]["volumes"]}
    hard = volumes[mounts["hard"]]
    assert hard["serverResponding"] is False
    assert any("did not answer" in note for note in hard["notes"]), hard["notes"]
    before = {v["mountPoint"]: v for v in mounts["before"]["spec"]["volumes"]}
    assert before[mounts["hard"]]["serverResponding"] is True


def test_nothing_else_of_the_scan_is_lost(scan_while_stopped, stopped):
    _, mounts = stopped
    after, before = scan_while_stopped.json()["spec"], mounts["before"]["spec"]
    assert {v["mountPoint"] for v in after["volumes"]} == {v["mountPoint"] for v in before["volumes"]}
    for volume in after["volumes"]:
        match = next(v for v in before["volumes"] if v["mountPoint"] == volume["mountPoint"])
        assert volume["effectiveOptions"] == match["effectiveOptions"]
    assert {(f["path"], f["mode"]) for f in after["sqlite"]} == {(f["path"], f["mode"]) for f in before["sqlite"]}
    assert after["sqlite"], "the SQLite lock on the hard mount is still held and must still be found"


def test_the_pods_reader_is_seen_stuck_on_the_hard_volume(scan_while_stopped, stopped):
    _, mounts = stopped
    volumes = {v["mountPoint"]: v for v in scan_while_stopped.json()["spec"]["volumes"]}
    hard = volumes[mounts["hard"]]
    states = hard["processes"]
    assert states["samples"] == PROCESS_SAMPLES and states["processes"] == 1, states
    assert states["uninterruptibleShare"] >= 0.9, states
    # The reader holds a file on the hard volume only: the soft volume's samples are not its.
    assert (volumes[mounts["soft"]].get("processes") or {}).get("samples", 0) == 0
    before = {v["mountPoint"]: v for v in mounts["before"]["spec"]["volumes"]}
    assert before[mounts["hard"]]["processes"]["uninterruptibleShare"] <= 0.5, before[mounts["hard"]]["processes"]


def test_the_check_makes_it_a_stuck_on_nfs_finding(scan_while_stopped, stopped):
    _, mounts = stopped
    report = scan_while_stopped.json()["spec"]
    read = read_node_report("lab", report)  # as the operator reads it
    hard = read.at(mounts["hard"])
    findings = check_volume(hard, {}, thresholds=Thresholds(), kernel_release=read.kernel_release).findings
    stuck = [f for f in findings if f.reason == "StuckOnNFS"]
    assert stuck, findings
    assert "uninterruptible sleep" in stuck[0].message and "did not answer the agent's probe" in stuck[0].message


def test_a_soft_mount_fails_with_an_error_instead_of_hanging(stopped):
    lab, mounts = stopped
    result = lab.vm.run(["stat", "-f", mounts["soft"]], timeout=120, check=False)
    assert not result.timed_out and result.rc != 0, result
    assert "Input/output error" in result.stderr or "timed out" in result.stderr, result.stderr


def test_the_soft_mounts_timeouts_are_counted_and_judged(stopped):
    # After the soft mount gave up (the test above), its counters hold the major timeout (with no thread
    # to answer, nothing may even be sent: no retransmission is counted): the agent reports it as a
    # rate, and the check makes a TransportUnhealthy finding.
    lab, mounts = stopped
    lab.vm.run(["stat", "-f", mounts["soft"]], timeout=120, check=False)
    report = lab.vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc",
                                "--probe-timeout", "1", "--process-samples", "0", timeout=600).json()["spec"]
    soft = next(v for v in report["volumes"] if v["mountPoint"] == mounts["soft"])
    activity = soft["activity"]
    assert activity["majorTimeoutsPerSecond"] * activity["windowSeconds"] >= 1, activity
    read = read_node_report("lab", report)
    findings = check_volume(read.at(mounts["soft"]), {}, thresholds=Thresholds(),
                            kernel_release=read.kernel_release).findings
    unhealthy = [f for f in findings if f.reason == "TransportUnhealthy"]
    assert unhealthy and "major timeout(s)" in unhealthy[0].message, findings


@pytest.mark.parametrize("attributes", list(ATTRIBUTE_STATES))
def test_the_sqlite_scans_stat_and_header_reads_never_pile_up_behind_the_dead_server(stopped, scan_while_stopped,
                                                                                      attributes):
    lab, mounts = stopped
    directory = mounts["directories"][attributes]
    result = lab.vm.python(REPEATED_SCANS, mounts["mount_points"][attributes], timeout=SCANS_TIMEOUT, check=False)
    # The process returns, and exits: a call stuck in the kernel holds a daemon thread that its exit ends, never
    # the scan or the exit. If it does not, labd's message shows where each of its tasks waits in the kernel.
    assert result.ok, f"timed out: {result.timed_out}; {result.stderr[-6000:]}"
    runs = json.loads(result.stdout)
    healthy = mounts["healthy_scans"][attributes]
    assert healthy[0]["stuck"] == 0 and healthy[0]["headers"] >= 1, healthy
    # The scans wait for the dead server once in all, STAT_TIMEOUT_SECONDS: the first scan's first call; later
    # calls find it still stuck and do not ask. Counted, not timed: TCG's noise is not the scan's (the seconds
    # are in the message, beside the healthy scans', for a person to read).
    assert [run["timeouts"] for run in runs] == [1, 0, 0], (runs, healthy, STAT_TIMEOUT_SECONDS)
    # One call stays stuck on the dead server's superblock, and later scans add none: no pile-up.
    assert [run["stuck"] for run in runs] == [1, 1, 1], runs
    assert runs[0]["threads"] == runs[1]["threads"] == runs[2]["threads"], runs
    assert runs[0]["stalled"] >= 1 and runs[2]["stalled"] > runs[0]["stalled"], runs
    assert all(run["headers"] == 0 for run in runs), runs  # nothing is read from a server that did not answer
    # The locked databases are still found from /proc/locks and fdinfo, which never ask the server.
    assert {f"{directory}/rollback.db", f"{directory}/wal.db"} <= set(runs[2]["paths"]), runs


def test_the_server_is_seen_again_once_it_answers(stopped, scan_while_stopped):
    lab, mounts = stopped
    lab.vm.run("rpc.nfsd 8")
    deadline = time.monotonic() + 300
    while True:
        report = lab.vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc",
                                    "--probe-timeout", "30").json()
        hard = next(v for v in report["spec"]["volumes"] if v["mountPoint"] == mounts["hard"])
        if hard["serverResponding"]:
            break
        assert time.monotonic() < deadline, hard
    assert hard["serverResponding"] is True and not any("did not answer" in note for note in hard["notes"]), hard
