"""Fixtures shared by tests/ and e2e/, registered once so that a whole run starts one control plane.

`make test` runs the suite in three lanes (pytest-xdist, `-n 3`, the scheduler below): the real node's tests in
one, the kernel lab's in another (the modules that boot a VM of their own first, then the shared lab VM's), and
every other module wherever a lane is free. A VM under TCG takes a host core while its tests work it (at rest, with
the chart on the real node, about a quarter of one), so at most two VMs run at once and the control-plane tests run
beside them. With two lanes the real
node's tests ran after the lab's in one lane, which was the whole run's length (`--durations=0` of b064634,
2026-12-06: that lane 2,311 s of a 2,322 s run, the other 1,720 s); the real node's and the lab's tests are
independent (each boots its own VM).
"""

import pytest
from tests.support import OWN_VM_MODULES, SHARED_LAB_FIXTURE, VM_TEST_DIRECTORIES, close_vm_resources, vm_directory

pytest_plugins = ["tests.cluster_fixtures", "tests.operator_fixtures", "tests.image_fixtures"]


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under xdist (`make test`'s -n 3): each VM test directory is one unit of work (one lane), every other module
    one of its own; the VMs' lanes are handed out before anything else."""
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((directory for directory in VM_TEST_DIRECTORIES if path.startswith(directory)), path)

        def _assign_work_unit(self, node) -> None:
            # xdist orders the queue by the number of tests in a unit; the VMs' lanes are the longest whatever their count.
            for scope in reversed(VM_TEST_DIRECTORIES):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return Lanes(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def own_vm(item: pytest.Item) -> bool:
        return item.path.as_posix().endswith(OWN_VM_MODULES)

    for item in items:
        if own_vm(item) and SHARED_LAB_FIXTURE in item.fixturenames:
            raise pytest.UsageError(f"{item.nodeid} uses the shared lab VM ({SHARED_LAB_FIXTURE}) but its module is in "
                                    "tests/support.py's OWN_VM_MODULES, which run before the shared VM boots: take it "
                                    "out of that list, or boot a VM of its own")
    # Each VM's tests together, the VM directories first; in the lab's, the modules with a VM of their own before the
    # shared VM boots, so that no more than one lab VM is up at a time.
    items.sort(key=lambda item: (VM_TEST_DIRECTORIES.index(vm_directory(item)) if vm_directory(item) else
                                 len(VM_TEST_DIRECTORIES), not own_vm(item)))


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the last module's fixtures may still use the VM
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    directory = vm_directory(item)
    if directory and vm_directory(nextitem) != directory:
        close_vm_resources(directory)
