"""A stale file handle and a dead TLS tunnel, made on a real kernel and found by the agent, then gone.

In the session's lab VM (neither breaks the server for anyone else):

- StaleFileHandle: a pod volume is a mount of a directory of the export (as a PV's path is); the
  directory is replaced on the server under the live mount. The kernel then fails every access to the
  mount with ESTALE, a new mount of the same path works, and the agent's probe finds the first and not
  the second: the finding is on the pod whose volume it is, and gone once the pod "restarted" (its volume
  mounted again).
- TLSTunnelDown: a pod volume is mounted as efs-utils mounts EFS, from 127.0.0.1 with a port of its TLS
  tunnel, through a local TCP forwarder there (lab/guest/tunnel.py) to the NFS server. The forwarder
  killed, nothing listens on the port, the mount hangs, and the agent says so; its probe of that mount
  stays stuck in the kernel, and the agent's process still exits (a killable wait). The forwarder back,
  the mount resumes and the finding is gone.

The mounts through the tunnel are made in the VM's own network namespace, as the kubelet's are, where
the agent reads the listeners (/proc/1/net/tcp); the stale one through a client namespace of its own.
"""

import shlex
import time
from collections.abc import Iterator

import pytest
from tests.kernel.conftest import start_tunnel, tunnel_listening

from mountwarden.lab.experiments import EFS_LIKE, EXPORT, Lab
from mountwarden.lab.vm import GuestResult

POD_UID = "0a1b0000-7a11-4000-8000-0000000000f1"
TUNNEL_PORT = 20049
PROBE_TIMEOUT = 3
#: A hard mount that notices a dead path within seconds (the AWS options wait a minute per request).
HARD_QUICK = "vers=4.1,hard,timeo=20,retrans=1"


def pod_volume(name: str) -> str:
    return f"/var/lib/kubelet/pods/{POD_UID}/volumes/kubernetes.io~nfs/{name}"


def scan(lab: Lab, *, check: bool = True) -> GuestResult:
    """One agent scan of the VM, as `mountwarden agent --once --dry-run` prints it (its log in stderr)."""
    return lab.vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc",
                              "--probe-timeout", str(PROBE_TIMEOUT), "--process-samples", "1", "--kernel-log", "",
                              timeout=600, check=check)


def failures(result: GuestResult, reason: str, mount_point: str) -> list[dict]:
    return [f for f in result.json()["spec"]["failures"]
            if f["reason"] == reason and f["evidence"].get("mountPoint") == mount_point]


def mine(result: GuestResult) -> list[dict]:
    """The failures of this module's volumes and servers (the session's VM is shared with other modules)."""
    return [f for f in result.json()["spec"]["failures"]
            if POD_UID in f["message"] or f["evidence"].get("server", "").startswith("127.0.0.1")]


def volume_of(result: GuestResult, mount_point: str) -> dict:
    return next(v for v in result.json()["spec"]["volumes"] if v["mountPoint"] == mount_point)


@pytest.fixture(scope="module")
def broken(lab: Lab) -> Iterator[dict]:
    """Both volumes healthy, scanned; both broken, the kernel asked and the agent scanning; both mended."""
    vm, client = lab.vm, lab.client()
    directory = f"{EXPORT}/stale-dir"
    vm.run(f"mkdir -p {directory} && echo before > {directory}/file")
    stale = lab.mount(EFS_LIKE, client, export=directory, at=pod_volume("stale"))
    tunneled = pod_volume("efs")
    pid = start_tunnel(vm, TUNNEL_PORT)
    # As efs-utils mounts: the local tunnel's address and port, in the node's (here the VM's) network namespace.
    vm.run(f"mkdir -p {tunneled} && mount -t nfs -o {HARD_QUICK},port={TUNNEL_PORT} 127.0.0.1:{EXPORT} "
           f"{shlex.quote(tunneled)}")
    again = "/mnt/lab/stale-again"
    try:
        healthy = scan(lab)
        vm.run(f"rm -rf {directory} && mkdir {directory} && echo after > {directory}/file")  # replaced on the server
        vm.run(f"kill {pid}")  # the tunnel dies under its live mount
        # The kernel's own word, before the agent's: the old mount is stale for good, a new one of the same path
        # works; the mount through the dead tunnel hangs (timeout(1) ends the stat: the wait is killable).
        kernel = {"stat -f": vm.run(f"stat -f {stale}", check=False)}  # statvfs() always asks the server
        # stat() and readdir() may be answered from the root's cached attributes until they expire (acdirmax, 60 s
        # by default: nfs(5)); then the server's answer, ESTALE, for good.
        expires = time.monotonic() + 60 + 15
        for call in ("stat", "ls"):
            while "Stale file handle" not in (result := vm.run(f"{call} {stale}", check=False)).stderr \
                    and time.monotonic() < expires:
                time.sleep(1)
            kernel[call] = result
        lab.mount(EFS_LIKE, client, export=directory, at=again)
        fresh = vm.run(f"stat -f {again} && cat {again}/file", check=False)
        hangs = vm.run(f"timeout 15 stat -f {tunneled}", check=False)
        found = scan(lab, check=False)
        # Mended: the pod "restarted" (its volume mounted again), the tunnel back.
        vm.run(f"umount {stale}")
        lab.mount(EFS_LIKE, client, export=directory, at=stale)
        start_tunnel(vm, TUNNEL_PORT)
        deadline = time.monotonic() + 300
        while True:  # the NFS client reconnects through the tunnel on its own schedule
            mended = scan(lab)
            if volume_of(mended, tunneled)["serverResponding"]:
                break
            assert time.monotonic() < deadline, mended.json()["spec"]["failures"]
        yield {"stale": stale, "tunneled": tunneled, "directory": directory, "healthy": healthy, "kernel": kernel,
               "fresh": fresh, "hangs": hangs, "found": found, "mended": mended,
               "resumed": vm.run(f"timeout 60 stat -f {tunneled}", check=False)}
    finally:
        if not tunnel_listening(vm, TUNNEL_PORT):
            start_tunnel(vm, TUNNEL_PORT)  # back, so that nothing of this module stays stuck for the next ones
        vm.run(f"umount -l {stale} {again} {tunneled}", check=False)


# -- a stale file handle ----------------------------------------------------------------------------------


def test_the_kernel_fails_every_access_to_the_old_mount_once_its_cache_expires_and_none_to_a_new_one(broken):
    for call, result in broken["kernel"].items():
        assert result.rc != 0 and "Stale file handle" in result.stderr, (call, result)
    assert broken["fresh"].ok and "after" in broken["fresh"].stdout, broken["fresh"]


def test_the_agent_finds_the_stale_handle_on_the_pod_whose_volume_it_is(broken):
    stale, found = broken["stale"], broken["found"]
    assert failures(broken["healthy"], "StaleFileHandle", stale) == []
    (failure,) = failures(found, "StaleFileHandle", stale)
    assert failure["podUid"] == POD_UID and failure["severity"] == "error"
    assert failure["evidence"]["probe"] == "ESTALE" and failure["evidence"]["export"] == broken["directory"]
    assert "ESTALE (Stale file handle)" in failure["message"] and "Restart the pod" in failure["remedy"]
    # The server answered (with ESTALE): not a server that does not respond.
    assert volume_of(found, stale)["serverResponding"] is True
    assert f"StaleFileHandle: volume stale of pod UID {POD_UID}" in found.stderr
    print(f"the agent's StaleFileHandle: {failure['message']}")


def test_the_stale_handle_goes_once_the_pod_mounts_its_volume_again(broken):
    assert volume_of(broken["mended"], broken["stale"])["serverResponding"] is True
    assert failures(broken["mended"], "StaleFileHandle", broken["stale"]) == []


# -- a dead TLS tunnel ------------------------------------------------------------------------------------


def test_with_the_tunnel_down_the_mount_hangs(broken):
    assert failures(broken["healthy"], "TLSTunnelDown", broken["tunneled"]) == []
    assert volume_of(broken["healthy"], broken["tunneled"])["serverResponding"] is True
    # timeout(1) killed the stat after the whole 15 s: the wait is killable.
    assert broken["hangs"].rc == 124 and broken["hangs"].seconds >= 14, broken["hangs"]


def test_the_agent_finds_the_tunnel_down_on_the_pod_and_still_exits(broken):
    found = broken["found"]
    assert found.ok, found.stderr[-3000:]  # the scan ended, and the process exited, a probe stuck behind
    (failure,) = failures(found, "TLSTunnelDown", broken["tunneled"])
    assert failure["podUid"] == POD_UID and failure["evidence"]["port"] == str(TUNNEL_PORT)
    assert f"127.0.0.1:{TUNNEL_PORT}" in failure["message"] and "nothing listens on that port" in failure["message"]
    assert "waits until it is back" in failure["message"] and "Restart the tunnel" in failure["remedy"]
    assert volume_of(found, broken["tunneled"])["serverResponding"] is False
    # The tunnel, not the server behind it, is down: said once, and nothing else is.
    assert sorted(f["reason"] for f in mine(found)) == ["StaleFileHandle", "TLSTunnelDown"]
    assert "exiting with 1 call(s) still blocked in the kernel" in found.stderr and "statvfs(" in found.stderr
    print(f"the agent's TLSTunnelDown: {failure['message']}")


def test_the_tunnel_back_the_mount_resumes_and_the_finding_goes(broken):
    assert failures(broken["mended"], "TLSTunnelDown", broken["tunneled"]) == []
    assert mine(broken["mended"]) == []
    assert broken["resumed"].ok, broken["resumed"]
