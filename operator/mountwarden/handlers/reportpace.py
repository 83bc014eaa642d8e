"""Each node's report handled at most once per ``--report-min-interval`` (mountwarden.core.node.pace says why).

One kopf handler receives every write of a NodeMountReport and gives it to the pacer. The pacer runs the
report's handling at once, or later with the node's latest report: the node's failures judged again
(handlers.failures), drift, health and SQLite Events (handlers.reports), the rollouts that verify woken
(handlers.rollouts). One node's handlings run one after the other, never side by side. kopf's index of the
reports (handlers.indexes.reports_by_node) files every write unread (api.nodemountreport.LazyNodeReport): a
write costs no read of its report, only the handlings here and the readers' own rounds do.
"""

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import kopf

from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import UnreadableReport, read_node_report
from mountwarden.core.node.pace import Admission, Pace
from mountwarden.handlers import failures, metrics, reports
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext

log = logging.getLogger(__name__)

#: The kopf indexes the report's handling reads (handlers.reports.announce_findings); kopf's are live objects,
#: so those handed with a write still hold what kopf knows when the handling runs later.
HANDLING_INDEXES = ("contracts", "classes_by_name", "rollouts_under_way")


@dataclass(frozen=True)
class Arrival:
    """One write (or the deletion) of a node's report, as kopf handed it."""

    node: str
    type: str | None
    spec: Mapping
    indexes: Mapping[str, kopf.Index] = field(default_factory=dict)


class ReportPacer:
    """Hands each node's latest report to ``handle`` at most once per ``min_interval`` seconds.

    Runs on one asyncio loop (kopf's): ``offer`` is called from a kopf handler on it.
    """

    def __init__(self, min_interval: float, handle: Callable[[Arrival], Awaitable[None]]) -> None:
        self._pace = Pace(min_interval)
        self._handle = handle
        self._latest: dict[str, Arrival] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: dict[str, asyncio.Task] = {}
        self._warned: set[str] = set()
        self._quiet = asyncio.Event()
        self._quiet.set()

    def offer(self, arrival: Arrival) -> None:
        node = arrival.node
        self._latest[node] = arrival
        admission, delay = self._pace.arrive(node, time.monotonic())
        if admission is Admission.NOW:
            self._start(node)
        elif admission is Admission.LATER:
            self._quiet.clear()
            self._timers[node] = asyncio.get_running_loop().call_later(delay, self._due, node)
        else:
            metrics.REPORT_WRITES_COALESCED.labels(node).inc()
            if node not in self._warned:
                self._warned.add(node)
                log.warning("node %s writes its NodeMountReport more often than every %.1f s: only its latest "
                            "report is handled, at that pace (mountwarden_report_writes_coalesced_total counts "
                            "the writes skipped; said once per node)", node, self._pace.min_interval)

    async def drained(self) -> None:
        """Until nothing is scheduled and no handling runs."""
        await self._quiet.wait()

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        running = list(self._running.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._quiet.set()

    def _due(self, node: str) -> None:
        self._timers.pop(node, None)
        self._pace.due(node, time.monotonic())
        self._start(node)

    def _start(self, node: str) -> None:
        arrival = self._latest.pop(node)
        previous = self._running.get(node)
        task = asyncio.get_running_loop().create_task(self._run(arrival, previous))
        self._running[node] = task
        self._quiet.clear()
        task.add_done_callback(functools.partial(self._finished, node))

    async def _run(self, arrival: Arrival, previous: asyncio.Task | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # one node's handlings in order
        metrics.REPORT_HANDLINGS.labels(arrival.node).inc()
        try:
            await self._handle(arrival)
        except Exception:  # one failed handling must not stop the next: the node's next report is handled again
            log.exception("handling the NodeMountReport of node %s failed", arrival.node)
        if arrival.type == "DELETED":  # a node gone: nothing kept about it, its series included
            self._pace.forget(arrival.node)
            self._warned.discard(arrival.node)
            for counter in (metrics.REPORT_HANDLINGS, metrics.REPORT_WRITES_COALESCED):
                with contextlib.suppress(KeyError):
                    counter.remove(arrival.node)

    def _finished(self, node: str, task: asyncio.Task) -> None:
        if self._running.get(node) is task:
            del self._running[node]
        if not self._running and not self._timers:
            self._quiet.set()


async def handle_report(memo: OperatorContext, arrival: Arrival) -> None:
    """What a node's report changes: its failures, its pods' Events, the rollouts that wait on it."""
    if arrival.type == "DELETED" or not arrival.spec:
        await memo.event_context.run(failures.follow_report, memo, arrival.node, None)
    else:
        try:
            report = await asyncio.to_thread(read_node_report, arrival.node, arrival.spec)
        except UnreadableReport as error:  # the CRD's schema refuses such a spec: one written around it
            log.warning("%s", error)
            return
        await memo.event_context.run(failures.follow_report, memo, arrival.node, report)
        await memo.event_context.run(functools.partial(
            reports.announce_findings, name=arrival.node, report=report, memo=memo, **arrival.indexes))
    if memo.rollout_wakeups is not None:
        memo.rollout_wakeups.wake_verifying()


async def receive_report(name: str, spec: kopf.Spec, type: str, memo: OperatorContext, **kwargs) -> None:
    memo.event_context.capture()
    memo.report_pacer.offer(Arrival(name, type, spec, {key: kwargs[key] for key in HANDLING_INDEXES}))


async def start_pacing(memo: OperatorContext, **_) -> None:
    memo.report_pacer = ReportPacer(memo.config.report_min_interval, functools.partial(handle_report, memo))


async def stop_pacing(memo: OperatorContext, **_) -> None:
    if memo.report_pacer is not None:
        await memo.report_pacer.close()


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.startup(registry=registry)(start_pacing)
    kopf.on.cleanup(registry=registry)(stop_pacing)
    kopf.on.event(GROUP, VERSION, REPORTS, registry=registry)(receive_report)
