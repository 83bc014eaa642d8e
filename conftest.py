"""Fixtures shared by tests/ and e2e/, registered once so that a whole run starts one control plane.

`make test` runs the suite in two lanes (pytest-xdist, `-n 2`, the scheduler below): the tests on an emulated VM (the
kernel lab, then the real node) in one, every other module in the other. A VM under TCG keeps a core busy while
it is up, and its tests mostly wait on it, so the control-plane tests run beside them instead of after them.
"""

import pytest
from tests.support import VM_TEST_DIRECTORIES, close_vm_resources, vm_directory

pytest_plugins = ["tests.cluster_fixtures", "tests.operator_fixtures", "tests.image_fixtures"]


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under xdist (`make test`'s -n 2): the VM lane is one unit of work, every other module one of its own."""
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "vm" if path.startswith(VM_TEST_DIRECTORIES) else path

    return Lanes(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The VM lane first, each VM's tests together (the lab's VM stops before the real node's boots), so that
    # xdist hands it out before anything else.
    items.sort(key=lambda item: (VM_TEST_DIRECTORIES.index(vm_directory(item)) if vm_directory(item) else
                                 len(VM_TEST_DIRECTORIES)))


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the last module's fixtures may still use the VM
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    directory = vm_directory(item)
    if directory and vm_directory(nextitem) != directory:
        close_vm_resources(directory)
