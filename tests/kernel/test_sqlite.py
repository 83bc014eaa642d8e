"""SQLite on a real NFS mount: found by `sqlite-scan`, with the server's own locks left out.

In the lab, client and server share one kernel, so /proc/locks holds both the client's
locks (on the NFS superblock's device) and nfsd's copies of them (on the exported tmpfs's
device): exactly what a scanner must tell apart by device on a node that is also a server.
"""

import time

import pytest

from mountwarden.lab.vm import LabVM

#: Holds both kinds of lock on databases it creates in the directory it is given (made if absent).
#: Every caller passes a directory of its own: the session's lab VM exports one directory to all
#: tests, and a holder left by an earlier test would otherwise keep these very files locked.
HOLDER = """
import os, sqlite3, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
rollback = sqlite3.connect(sys.argv[1] + "/rollback.db", isolation_level=None)
rollback.execute("create table if not exists t(x)")
rollback.execute("begin immediate")  # RESERVED, with a -journal
rollback.execute("insert into t values (1)")
wal = sqlite3.connect(sys.argv[1] + "/wal.db", isolation_level=None)
assert wal.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
wal.execute("create table if not exists t(x)")
wal.execute("insert into t values (1)")
wal.execute("begin")
wal.execute("select * from t").fetchall()  # a read transaction: SHARED, -shm mapped
print("holding", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def mount(lab):
    return lab.mount("vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport")


@pytest.fixture(scope="module")
def holding(lab, mount):
    """The directory on ``mount`` where a process holds the databases' locks."""
    directory = f"{mount}/sqlite-scan"
    vm: LabVM = lab.vm
    vm.run(f"python3 -c '{HOLDER}' {directory} > /tmp/sqlite-holder.log 2>&1 &")
    deadline = time.monotonic() + 180
    while "holding" not in vm.run("cat /tmp/sqlite-holder.log", check=False).stdout:
        assert time.monotonic() < deadline, vm.run("cat /tmp/sqlite-holder.log", check=False).stdout
        time.sleep(1)
    yield directory
    vm.run(f"pkill -f ' {directory}$'", check=False)


@pytest.fixture(scope="module")
def scan(lab, holding):
    return lab.vm.mountwarden("sqlite-scan", "--proc-root", "/proc", "--json", check=False).json()


def test_both_databases_are_found_with_their_severity(scan, holding):
    found = {finding["path"]: finding for finding in scan["findings"]}
    assert found[f"{holding}/wal.db"]["mode"] == "wal"
    assert found[f"{holding}/wal.db"]["severity"] == "critical"
    assert found[f"{holding}/rollback.db"]["mode"] == "rollback"
    assert found[f"{holding}/rollback.db"]["severity"] == "warning"
    assert found[f"{holding}/rollback.db"]["lock"] == "RESERVED"


def test_the_servers_own_lock_lines_are_not_reported(lab, scan, mount, holding):
    client_device = lab.mountinfo_entry(mount).major_minor
    # /proc/locks: "1: POSIX ADVISORY WRITE <pid> <maj>:<min>:<inode> <start> <end>", maj and min in hex.
    inode = lab.vm.run(f"stat -c %i {holding}/rollback.db").stdout.strip()
    # Only this database's lines: other tests' holders may still hold locks in the same VM.
    reserved = [fields for line in lab.vm.read_text("/proc/locks").splitlines()
                if " 1073741825 " in line and (fields := line.split())[5].split(":")[2] == inode]
    devices = {":".join(str(int(part, 16)) for part in fields[5].split(":")[:2]) for fields in reserved}
    # nfsd holds a copy of the client's RESERVED lock on the exported file system's device...
    assert client_device in devices and len(devices) == 2, reserved
    # ...and none of those becomes a finding: this directory's are on the NFS client's device, none on the server's.
    (server_device,) = devices - {client_device}
    ours = [finding for finding in scan["findings"] if finding["path"].startswith(f"{holding}/")]
    assert len(ours) == 2 and {finding["device"] for finding in ours} == {client_device}, ours
    assert server_device not in {finding["device"] for finding in scan["findings"]}, scan["findings"]
