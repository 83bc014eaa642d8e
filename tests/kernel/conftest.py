"""The kernel lab as fixtures: a real Linux NFS client and server in a QEMU VM.

`lab_image` finds the image ($MOUNTWARDEN_LAB_DIR, which `make test` sets from
hack/lab/build.sh, or the cache) and builds it when absent; `lab` boots one VM for the
session with the NFS server running (no delegations, as on EFS) and hands out
independent NFS clients (network namespaces), so each test starts from a fresh client.
A lab that cannot be built or booted fails the tests with the reason; it never skips.
"""

import time
from collections.abc import Iterator

import pytest
from tests.support import close_after_directory, vm_directory

from mountwarden.lab.experiments import LIVE_SHARING_CASES, Lab, Measured, measure_deterministic
from mountwarden.lab.image import LabBuildError, LabImage, build_image, find_image
from mountwarden.lab.vm import GUEST_DIR, LabError, LabVM


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if vm_directory(item) == "tests/kernel/":
            item.add_marker(pytest.mark.kernel)


@pytest.fixture(scope="session")
def lab_image() -> LabImage:
    try:
        return find_image() or build_image()
    except LabBuildError as error:
        pytest.fail(f"the kernel lab image could not be built: {error}", pytrace=False)


def boot(image: LabImage) -> LabVM:
    vm = LabVM(image)
    try:
        vm.start()
    except LabError as error:
        pytest.fail(f"the kernel lab VM did not boot: {error}", pytrace=False)
    return vm


@pytest.fixture(scope="session")
def lab_vm(lab_image: LabImage) -> Iterator[LabVM]:
    vm = boot(lab_image)
    close_after_directory("tests/kernel/", vm.stop)  # before the real node's VM boots
    try:
        yield vm
    finally:
        vm.stop()


@pytest.fixture(scope="session")
def lab(lab_vm: LabVM) -> Lab:
    return Lab.start(lab_vm)


def start_and_wait(vm: LabVM, script: str, directory: str, log: str, marker: str, *, timeout: float = 180) -> None:
    """Run the Python ``script`` with DIRECTORY in the background in the VM; wait until its log says ``marker``."""
    vm.run(f"python3 -c '{script}' {directory} > {log} 2>&1 &")
    deadline = time.monotonic() + timeout
    while marker not in vm.run(f"cat {log}", check=False).stdout.split():
        assert time.monotonic() < deadline, vm.run(f"cat {log}", check=False).stdout
        time.sleep(1)


@pytest.fixture(scope="session")
def measured(lab: Lab) -> Measured:
    """The facts the kernel gives the same on every run, measured once per session in one round trip to the VM:
    the release, the server, LIVE_SHARING_CASES of the sharing table (make kernel-facts measures all of it),
    nconnect, rsize/wsize, each preset's printed options, locks and delegations, with the raw second reading."""
    return measure_deterministic(lab, sharing_cases=LIVE_SHARING_CASES)


def start_tunnel(vm: LabVM, port: int) -> int:
    """lab/guest/tunnel.py on 127.0.0.1:``port`` to the VM's NFS server, as efs-utils' TLS tunnel is to the client;
    its pid, once it listens."""
    log = f"/tmp/tunnel-{port}.log"
    pid = int(vm.run(f"python3 {GUEST_DIR}/tunnel.py {port} 127.0.0.1 2049 > {log} 2>&1 & echo $!").stdout)
    deadline = time.monotonic() + 60
    while "listening" not in vm.run(f"cat {log}", check=False).stdout:
        assert time.monotonic() < deadline, vm.run(f"cat {log}", check=False).stdout
        time.sleep(0.5)
    return pid


def tunnel_listening(vm: LabVM, port: int) -> bool:
    """Whether anything listens on ``port`` in the VM's network namespace (LISTEN is state 0A)."""
    return vm.run(f"grep -qi ':{port:04X} 00000000:0000 0A' /proc/net/tcp", check=False).ok
