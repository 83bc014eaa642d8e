"""A real NFS client in user space (libnfs's nfs-cat, from Debian) in a pod's cgroup, talking to knfsd: reported.

In the session's lab VM, which also holds other tests' kernel mounts: their transports are sockets no
process holds, so only nfs-cat may be reported. nfs-cat writes the file into a pipe nobody reads, so it
blocks with its connection to port 2049 open while the agent scans.
"""

import time

import pytest

from mountwarden.lab.experiments import EXPORT, Lab

KUBELET_VOLUME = f"/var/lib/kubelet/pods/{'0a1b0000-7a11-4000-8000-00000000c11f'}/volumes/kubernetes.io~nfs/kernel"

POD_UID = "0a1b0000-7a11-4000-8000-00000000c11e"
SCOPE = (f"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
         f"{POD_UID.replace('-', '_')}.slice/cri-containerd-{'c' * 64}.scope")


@pytest.fixture(scope="module")
def client(lab: Lab):
    vm = lab.vm
    # A kernel mount of the same server beside it, its transport connected by a read: not a userspace client.
    kernel = lab.mount("vers=3", at=KUBELET_VOLUME)
    vm.run(f"mkdir -p {EXPORT}/userspace && head -c 16777216 /dev/zero > {EXPORT}/userspace/big")
    vm.run(f"cat {kernel}/userspace/big > /dev/null", timeout=300)
    vm.run(f"mkdir -p {SCOPE} && sh -c 'echo $$ > {SCOPE}/cgroup.procs && "
           f"nfs-cat nfs://127.0.0.1{EXPORT}/userspace/big | sleep 3600' > /tmp/nfs-cat.log 2>&1 &")
    deadline = time.monotonic() + 120
    while "nfs-cat" not in vm.run("ss -tnp state established '( dport = :2049 )'", check=False).stdout:
        assert time.monotonic() < deadline, vm.run("cat /tmp/nfs-cat.log; ss -tnp", check=False).stdout
        time.sleep(0.5)
    try:
        yield vm
    finally:
        vm.run("pkill -x nfs-cat; pkill -f 'sleep 3600'", check=False)
        vm.run(f"umount -l {kernel}", check=False)


def test_the_agent_reports_the_pods_userspace_nfs_client_and_nothing_else(client):
    report = client.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc",
                                "--probe-timeout", "0", "--process-samples", "0").json()["spec"]
    found = report["userspaceClients"]
    assert [(c["command"], c["podUid"], c["remote"]) for c in found] == [("nfs-cat", POD_UID, "127.0.0.1:2049")], found
    assert "talks NFS to an NFS server at 127.0.0.1:2049" in found[0]["message"]
    # The kernel mount of the same server, connected, is a volume of the report and no userspace client.
    assert KUBELET_VOLUME in [volume["mountPoint"] for volume in report["volumes"]]
