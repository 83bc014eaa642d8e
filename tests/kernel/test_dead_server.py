"""A server that stops answering (nfsd stopped) while the agent scans.

In a VM of its own (the server is stopped on purpose): two pod volumes, one hard (the AWS
options) with a process holding a SQLite lock on it, one soft. With nfsd's threads at 0 the
agent's one-shot scan must still finish within its probe timeout plus the scan itself, say
that the hard mount's server does not answer, and keep everything else it found.
"""

import time
from collections.abc import Iterator

import pytest
from tests.kernel.conftest import boot
from tests.kernel.test_sqlite import HOLDER

from mountwarden.lab.experiments import EFS_LIKE, Lab
from mountwarden.lab.livescan import mount_point as try_mount_point
from mountwarden.lab.vm import LabVM

PROBE_TIMEOUT = 5


@pytest.fixture(scope="module")
def stopped(lab_image) -> Iterator[tuple[Lab, dict]]:
    vm = boot(lab_image)
    try:
        lab = Lab.start(vm)
        hard = lab.mount(EFS_LIKE, at=try_mount_point(0))
        soft = lab.mount("vers=4.1,soft,timeo=10,retrans=1,nosharecache", at=try_mount_point(1))
        vm.run(f"python3 -c '{HOLDER}' {hard} > /tmp/sqlite-holder.log 2>&1 &")
        deadline = time.monotonic() + 180
        while "holding" not in vm.run("cat /tmp/sqlite-holder.log", check=False).stdout:
            assert time.monotonic() < deadline
            time.sleep(1)
        before = vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc").json()
        vm.run("rpc.nfsd 0")  # no threads: the server accepts nothing more
        yield lab, {"hard": hard, "soft": soft, "before": before}
    finally:
        vm.stop()


@pytest.fixture(scope="module")
def scan_while_stopped(stopped):
    lab, _ = stopped
    vm: LabVM = lab.vm
    result = vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc",
                            "--probe-timeout", str(PROBE_TIMEOUT), timeout=600, check=False)
    return result


def test_the_scan_finishes_and_succeeds(scan_while_stopped):
    assert scan_while_stopped.ok, scan_while_stopped.stderr[-2000:]


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


def test_a_soft_mount_fails_with_an_error_instead_of_hanging(stopped):
    lab, mounts = stopped
    result = lab.vm.run(["stat", "-f", mounts["soft"]], timeout=120, check=False)
    assert not result.timed_out and result.rc != 0, result
    assert "Input/output error" in result.stderr or "timed out" in result.stderr, result.stderr


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
