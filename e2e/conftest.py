"""End to end: the Helm chart installed into a real API server, and the operator run as the chart's identities.

The fixtures are the whole suite's (the root conftest.py registers them for tests/ and e2e/
alike, so one run starts one control plane): `cluster` is the local control plane with kwok
nodes, or the cluster in KUBECONFIG with MOUNTWARDEN_TEST_CLUSTER=existing. kwok takes the
chart's pods to Running and Ready without pulling the image, which does not exist here; the
operator's own behaviour in the cluster is checked by running `mountwarden operator` on this
machine as the chart's pods would: with their pod names, their service account's tokens
(bound to those pods) and the arguments of the installed Deployment.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.helpers import OperatorRun


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def operators() -> Iterator[list[OperatorRun]]:
    """Operators a test starts; stopped afterwards."""
    started: list[OperatorRun] = []
    yield started
    for run in started:
        run.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On a failure, attach the tail of each operator's log (the session operator's is attached by
    tests/operator_fixtures.py): the reason is usually there."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    if report.failed:
        for run in funcargs.get("operators") or []:
            report.sections.append((f"operator log {run.log.name} (tail)", run.logs()[-6000:]))
