"""A node's reports handled at most once per interval, the latest one: a node that writes in a loop costs the
operator one handling per interval, and nothing it said last is lost."""

import asyncio

import pytest
from tests.support import report_spec

from mountwarden.api import nodemountreport
from mountwarden.api.nodemountreport import LazyNodeReport, node_report
from mountwarden.core.node.pace import Admission, Pace
from mountwarden.handlers import indexes, metrics
from mountwarden.handlers.reportpace import Arrival, ReportPacer

INTERVAL = 2.0


def test_the_first_report_is_handled_at_once():
    assert Pace(INTERVAL).arrive("node-a", now=100.0) == (Admission.NOW, 0.0)


def test_a_report_within_the_interval_waits_for_the_rest_of_it():
    pace = Pace(INTERVAL)
    pace.arrive("node-a", now=100.0)
    assert pace.arrive("node-a", now=100.5) == (Admission.LATER, 1.5)
    assert pace.arrive("node-a", now=100.7) == (Admission.COALESCED, 0.0)
    assert pace.scheduled == {"node-a"}


def test_each_node_has_its_own_pace():
    pace = Pace(INTERVAL)
    pace.arrive("node-a", now=100.0)
    assert pace.arrive("node-b", now=100.1) == (Admission.NOW, 0.0)


def test_after_a_scheduled_handling_the_interval_counts_from_it():
    pace = Pace(INTERVAL)
    pace.arrive("node-a", now=100.0)
    pace.arrive("node-a", now=100.5)
    pace.due("node-a", now=102.0)
    assert pace.arrive("node-a", now=103.0) == (Admission.LATER, 1.0)
    pace.due("node-a", now=104.0)
    assert pace.arrive("node-a", now=106.0) == (Admission.NOW, 0.0)


def test_a_deleted_nodes_pace_is_forgotten_but_not_while_a_handling_is_scheduled():
    pace = Pace(INTERVAL)
    pace.arrive("node-a", now=100.0)
    pace.forget("node-a")
    assert len(pace) == 0
    pace.arrive("node-a", now=100.1)
    pace.arrive("node-a", now=100.2)
    pace.forget("node-a")
    assert pace.scheduled == {"node-a"} and len(pace) == 1


def test_a_zero_interval_handles_every_report():
    pace = Pace(0.0)
    assert [pace.arrive("node-a", now=100.0)[0] for _ in range(3)] == [Admission.NOW] * 3


def handled_by(pacer_interval: float, arrivals: list[Arrival], handle=None) -> tuple[list[Arrival], ReportPacer]:
    handled: list[Arrival] = []

    async def record(arrival: Arrival) -> None:
        handled.append(arrival)
        if handle is not None:
            await handle(arrival)

    async def run() -> ReportPacer:
        pacer = ReportPacer(pacer_interval, record)
        for arrival in arrivals:
            pacer.offer(arrival)
        await asyncio.wait_for(pacer.drained(), timeout=30)
        return pacer

    return handled, asyncio.run(run())


def test_a_burst_of_writes_is_handled_twice_the_first_and_the_latest():
    burst = [Arrival("node-a", "MODIFIED", {"scan": n}) for n in range(50)]
    before = metrics.REPORT_WRITES_COALESCED.labels("node-a")._value.get()
    handled, _ = handled_by(0.05, burst)
    assert [arrival.spec["scan"] for arrival in handled] == [0, 49]
    assert metrics.REPORT_WRITES_COALESCED.labels("node-a")._value.get() - before == 48


def test_nodes_are_paced_apart():
    burst = [Arrival(node, "MODIFIED", {"scan": n}) for n in range(3) for node in ("node-a", "node-b")]
    handled, _ = handled_by(0.05, burst)
    assert sorted((a.node, a.spec["scan"]) for a in handled) == [("node-a", 0), ("node-a", 2),
                                                                 ("node-b", 0), ("node-b", 2)]


def test_one_nodes_handlings_never_overlap_even_when_slower_than_the_interval():
    running: list[str] = []
    overlapped: list[str] = []

    async def slow(arrival: Arrival) -> None:
        if arrival.node in running:
            overlapped.append(arrival.node)
        running.append(arrival.node)
        await asyncio.sleep(0.1)  # twice the interval: the scheduled handling comes due while this one runs
        running.remove(arrival.node)

    handled, _ = handled_by(0.05, [Arrival("node-a", "MODIFIED", {"scan": n}) for n in range(2)], slow)
    assert [a.spec["scan"] for a in handled] == [0, 1]
    assert overlapped == []


def test_a_failed_handling_leaves_the_next_one_to_run():
    async def fail_first(arrival: Arrival) -> None:
        if arrival.spec["scan"] == 0:
            raise RuntimeError("the API went away")

    handled, _ = handled_by(0.05, [Arrival("node-a", "MODIFIED", {"scan": n}) for n in range(2)], fail_first)
    assert [a.spec["scan"] for a in handled] == [0, 1]


def test_a_deletion_is_handled_as_the_latest_and_the_node_forgotten():
    handled, pacer = handled_by(0.05, [Arrival("node-a", "MODIFIED", {"scan": 0}),
                                       Arrival("node-a", "DELETED", {"scan": 0})])
    assert [a.type for a in handled] == ["MODIFIED", "DELETED"]
    assert len(pacer._pace) == 0
    series = {sample.labels.get("node") for metric in (metrics.REPORT_HANDLINGS, metrics.REPORT_WRITES_COALESCED)
              for family in metric.collect() for sample in family.samples}
    assert "node-a" not in series


@pytest.mark.parametrize("interval", [0.0, 0.05])
def test_a_pacer_with_nothing_to_do_is_drained(interval):
    handled, _ = handled_by(interval, [])
    assert handled == []


def test_kopfs_index_files_a_report_unread_and_it_is_read_once_when_asked(monkeypatch):
    reads: list[str] = []
    real = nodemountreport.read_node_report
    monkeypatch.setattr(nodemountreport, "read_node_report", lambda name, spec: reads.append(name) or real(name, spec))
    filed = asyncio.run(indexes.reports_by_node("node-a", report_spec("node-a")))
    assert reads == []
    index = {"node-a": [filed["node-a"]]}
    assert nodemountreport.node_report(index, "node-a").node == "node-a"
    assert nodemountreport.node_reports(index).keys() == {"node-a"}
    assert reads == ["node-a"]


def test_a_report_that_cannot_be_read_counts_as_missing():
    assert node_report({"node-a": [LazyNodeReport("node-a", {"volumes": "not a list"})]}, "node-a") is None
    assert node_report({}, "node-a") is None
