"""What one agent scan reads: every walk of the node's processes (activity, mount helpers, sockets, SQLite headers)
leaves the kernel's threads out and, within one scan, lists the processes once (proven on this machine's real
/proc); the host's whole lock table and socket table are read only when a mount can need them."""

import os
import subprocess
import sys
from pathlib import Path

from tests.procroot import Mount, Process, assemble_proc_root, pod_uid

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.failures import FailureWatch
from mountwarden.agent.scan import scan_node_report
from mountwarden.agent.sqlitescan import report_findings
from mountwarden.core.findings import Reason
from mountwarden.core.node.activity import is_kernel_thread
from mountwarden.core.node.scan import scan_node
from mountwarden.core.procfs import parse_mountinfo, parse_mountstats

#: /proc/2/stat of kthreadd on a 6.x kernel (flags 2129984 = 0x208040: PF_KTHREAD | PF_NOFREEZE | PF_FORKNOEXEC).
KTHREADD = ("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 14 0 0 18446744073709551615 0 0 0 0 0 0 0 "
            "2147483647 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
#: A user process whose command holds ") " and digits, as comm may: the flags are still the 9th field (4194304,
#: PF_FORKNOEXEC alone).
TRICKY_USER = "27455 (a) 1 2 3) R 27450 27450 25002 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 3040358 3133440 386\n"


def test_kernel_threads_are_told_by_pf_kthread_in_the_stat_flags():
    assert is_kernel_thread(KTHREADD)
    assert not is_kernel_thread(TRICKY_USER)
    assert not is_kernel_thread(Path("/proc/self/stat").read_text())
    assert not is_kernel_thread("42 (truncated) S 1")  # too short to have flags: not taken for a kernel thread


def read(path: str) -> bytes | None:
    """A /proc file's bytes; None when its process is gone (processes come and go while the test reads)."""
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def test_user_processes_of_the_real_proc_are_every_process_but_the_kernels_threads():
    proc = ProcRoot(Path("/proc"))
    before = set(proc.pids())  # listed first: a process started later is in neither set
    listed = dict(proc.user_processes())
    assert os.getpid() in listed and listed[os.getpid()].startswith(f"{os.getpid()} (")
    assert not any(is_kernel_thread(text) for text in listed.values())
    left_out = before - set(listed)
    kernel_threads = {pid for pid in left_out if read(f"/proc/{pid}/stat") is not None}  # the others exited
    assert kernel_threads, "this machine's /proc shows no kernel thread (kthreadd, kworkers)"
    # Told apart by other marks than the flags: a kernel thread has no command line and no executable.
    assert all(read(f"/proc/{pid}/cmdline") in (b"", None) and not os.path.exists(f"/proc/{pid}/exe")
               for pid in kernel_threads), kernel_threads


def test_one_scan_lists_the_processes_once_and_the_next_scan_lists_them_again():
    proc = ProcRoot(Path("/proc"))
    with proc.one_scan():
        first = proc.user_processes()
        started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert proc.user_processes() is first  # the same listing: the new process is not in it
            assert started.pid not in dict(proc.user_processes())
        finally:
            started.kill()
            started.wait()
    after = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert after.pid in dict(proc.user_processes())  # outside a scan, each call reads /proc again
        with proc.one_scan():
            assert after.pid in dict(proc.user_processes())
    finally:
        after.kill()
        after.wait()


def test_a_process_without_a_stat_file_is_gone_and_counted_so(tmp_path):
    assembled = assemble_proc_root(tmp_path / "proc", [Mount("pv-a")], locks=None, processes=[
        Process(4242, cgroup="0::/\n", stat=TRICKY_USER.replace("27455", "4242", 1)),
        Process(4243, cgroup="0::/\n"),
        Process(2, stat=KTHREADD)])
    proc = ProcRoot(assembled.path)
    assert [pid for pid, _ in proc.user_processes()] == [4242]
    assert proc.counters.vanished == 2  # 4243 and pid 1 (its mount tables only, no stat)


def test_without_a_network_mount_the_sqlite_scan_does_not_read_the_lock_table(tmp_path):
    proc = ProcRoot(tmp_path)  # no locks file: a read of it would count as vanished
    assert report_findings(proc, []) == [] and proc.counters.vanished == 0
    assembled = assemble_proc_root(tmp_path / "proc", [Mount("pv-a", pod_uid=pod_uid("a"))],
                                   locks=None)
    proc = ProcRoot(assembled.path)
    result = scan_node_report(proc, node_name="n1", kubelet_root=assembled.kubelet_root,
                              network_fstypes=["nfs", "nfs4"], sqlite_scan=report_findings)
    assert result.scan.network_mounts and proc.counters.vanished == 1  # with one, /proc/locks is read (absent here)


class ListenersRead(ProcRoot):
    """A real proc root that remembers how often the host's listening sockets were read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.listener_reads = 0

    def listeners(self):
        self.listener_reads += 1
        return super().listeners()


#: A mount through efs-utils' TLS tunnel on 127.0.0.1:20049 (as in tests/unit/test_nodescan.py), one straight to its server.
TUNNELLED = ("310 25 0:71 / /var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~csi/pv-tls/mount rw,relatime shared:1 - "
             "nfs4 127.0.0.1:/ rw,vers=4.1,hard,proto=tcp,port=20049,timeo=600,retrans=2,sec=sys,"
             "clientaddr=127.0.0.1,local_lock=none,addr=127.0.0.1")
DIRECT = ("311 25 0:72 / /var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~csi/pv-nfs/mount rw,relatime shared:1 - "
          "nfs4 10.0.0.5:/ rw,vers=4.1,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.9,"
          "local_lock=none,addr=10.0.0.5")
LISTENING_ON_20049 = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   1: 0100007F:4E51 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 15226 1 0 100 0 0 10 0\n")


def test_the_host_socket_table_is_read_only_when_a_volume_goes_through_a_local_tunnel(tmp_path):
    uid = pod_uid("tls")
    (tmp_path / "1" / "net").mkdir(parents=True)
    proc = ListenersRead(tmp_path)

    def judge(*lines: str):
        scan = scan_node(parse_mountinfo("\n".join(line.format(uid=uid) for line in lines)), parse_mountstats(""),
                         kubelet_roots=["/var/lib/kubelet"])
        reasons = [f.finding.reason for f in FailureWatch(proc, node_name="n1", kernel_log=None).judge(
            scan, None, None, {}, lambda pod: pod)]
        return proc.listener_reads, reasons

    assert judge(DIRECT) == (0, [])
    (tmp_path / "1" / "net" / "tcp").write_text(LISTENING_ON_20049.replace("0100007F:4E51", "0100007F:4E52"))
    assert judge(DIRECT, TUNNELLED) == (1, [Reason.TLS_TUNNEL_DOWN])  # nothing listens on 20049
    (tmp_path / "1" / "net" / "tcp").write_text(LISTENING_ON_20049)
    assert judge(TUNNELLED) == (2, [])
