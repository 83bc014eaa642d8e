"""Fixtures shared by tests/ and e2e/, registered once so that a whole run starts one control plane."""

import pytest

pytest_plugins = ["tests.cluster_fixtures", "tests.operator_fixtures", "tests.image_fixtures"]

#: Where the tests of each emulated VM live, in the order they run: last, each VM's tests together, so that a VM
#: (a core's worth of TCG while it is up) never runs beside the other tests or beside the other VM.
VM_TEST_DIRECTORIES = ("tests/kernel/", "tests/realnode/")


def vm_order(item: pytest.Item) -> int:
    path = item.path.as_posix()
    return next((rank for rank, directory in enumerate(VM_TEST_DIRECTORIES, 1) if f"/{directory}" in path), 0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=vm_order)  # stable: within each group, the order pytest collected
