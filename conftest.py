"""Fixtures shared by tests/ and e2e/, registered once so that a whole run starts one control plane.

`make test` runs the suite in two lanes (pytest-xdist, `-n 2`, the scheduler below): the tests on the shared emulated
VMs (the kernel lab, then the real node) in one, every other module beside them in the other. A VM under TCG keeps a
core busy while it is up, and its tests mostly wait on it, so the control-plane tests run beside them instead of
after them. The kernel modules that boot a VM of their own (OWN_VM_MODULES) go to the other lane first: the shared
VMs' lane was the whole run's length, the other lane idle for its last ten minutes (`--durations=0`, 2026-12-04: the
shared VMs' tests 1,677 s, the own VMs' 370 s, the rest 1,422 s).
"""

import pytest
from tests.support import OWN_VM_MODULES, SHARED_LAB_FIXTURE, VM_TEST_DIRECTORIES, close_vm_resources, vm_directory

pytest_plugins = ["tests.cluster_fixtures", "tests.operator_fixtures", "tests.image_fixtures"]

#: The shared VMs' lane, one unit of work.
VM_LANE = "vm"


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under xdist (`make test`'s -n 2): the shared VMs' lane is one unit of work, every other module one of its own;
    the lane and the modules with a VM of their own are handed out before anything else."""
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return VM_LANE if path.startswith(VM_TEST_DIRECTORIES) and path not in OWN_VM_MODULES else path

        def _assign_work_unit(self, node) -> None:
            # xdist orders the queue by the number of tests in a unit; the VMs' units are few tests and long.
            for scope in reversed((VM_LANE, *OWN_VM_MODULES)):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return Lanes(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.as_posix().endswith(OWN_VM_MODULES) and SHARED_LAB_FIXTURE in item.fixturenames:
            raise pytest.UsageError(f"{item.nodeid} uses the shared lab VM ({SHARED_LAB_FIXTURE}) but its module is in "
                                    "tests/support.py's OWN_VM_MODULES, which run in the other lane: take it out of "
                                    "that list, or boot a VM of its own")
    # The VM lane first, each VM's tests together (the lab's VM stops before the real node's boots).
    items.sort(key=lambda item: (VM_TEST_DIRECTORIES.index(vm_directory(item)) if vm_directory(item) else
                                 len(VM_TEST_DIRECTORIES)))


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the last module's fixtures may still use the VM
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    directory = vm_directory(item)
    if directory and vm_directory(nextitem) != directory:
        close_vm_resources(directory)
