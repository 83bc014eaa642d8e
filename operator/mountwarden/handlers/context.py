"""What every handler of the operator shares: its settings, its clients and its in-memory state, typed.

kopf hands this object to every handler as ``memo`` (a shallow copy per resource object, so that
each field is the same object everywhere). It is built once, by mountwarden.handlers.runner.run;
the start-up handlers of the features that are on fill their own field (admission, rollouts,
policy reports), which is None while a feature is off.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the handlers that own these import this module
    from kubernetes.client import ApiClient

    from mountwarden.adapters.kube import ProfileConditions, StorageClasses
    from mountwarden.adapters.pods import PodPlacements
    from mountwarden.adapters.watches import CoreWatches
    from mountwarden.handlers.admission import AdmissionState
    from mountwarden.handlers.config import OperatorConfig
    from mountwarden.handlers.credits import CreditFetcher
    from mountwarden.handlers.failures import MountFailures
    from mountwarden.handlers.inventory import InventoryLoop
    from mountwarden.handlers.policyreports import PolicyReportPublisher
    from mountwarden.handlers.posted import PostedFindings
    from mountwarden.handlers.remediation import EvictionLog
    from mountwarden.handlers.reportpace import ReportPacer
    from mountwarden.handlers.rollouts import RolloutWakeups


Result = TypeVar("Result")


class EventContext:
    """The context of a kopf event handler, for the loops that start-up handlers create to post Events through.

    kopf sets its Event queue (what kopf.warn and kopf.info post through) per object as it processes it
    (kopf/_core/reactor/processing.py), never for a task a start-up handler creates: an Event posted from
    such a loop raises LookupError. The first event of any resource lends its context; the loops run their
    work in a copy of it.
    """

    def __init__(self) -> None:
        self._context: contextvars.Context | None = None

    def capture(self) -> None:
        """Called from a kopf event handler; the first call keeps its context."""
        if self._context is None:
            self._context = contextvars.copy_context()

    @property
    def ready(self) -> bool:
        return self._context is not None

    async def run(self, work: Callable[..., Result], *args) -> Result:
        """``work(*args)`` in a thread, able to post Events (once ``ready``)."""
        assert self._context is not None, "no kopf event handled yet"
        return await asyncio.to_thread(self._context.copy().run, work, *args)


def always_active() -> bool:
    """A standalone operator: the only replica, always the active one."""
    return True


@dataclass
class Shutdown:
    """Ends the operator from inside: kopf's stop flag, and why, for the process's exit (handlers.runner.run).

    An asyncio.Event set on kopf's loop: kopf waits for a threading.Event or a concurrent Future in one of its
    executor's threads, which that would take from the handlers for the operator's whole life.
    """

    flag: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str | None = None
    exit_code: int = 0
    loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        """Called on kopf's loop, before any ``request``."""
        self.loop = asyncio.get_running_loop()

    def request(self, reason: str, exit_code: int) -> None:
        """From any thread: stop the operator, the first reason given standing."""
        if self.reason is None and self.loop is not None:
            self.reason, self.exit_code = reason, exit_code
            self.loop.call_soon_threadsafe(self.flag.set)


@dataclass
class OperatorContext:
    config: OperatorConfig
    kube_client: ApiClient
    #: Writes the versioned StorageClasses; ProfileConditions applies each handler's own conditions.
    storage_classes: StorageClasses
    conditions: ProfileConditions
    #: Which findings were posted as Events already (each is posted once).
    posted_findings: PostedFindings
    #: The watches of pods, PVs and claims kept outside kopf, and where each pod runs.
    watches: CoreWatches
    pods: PodPlacements
    #: One batched CloudWatch fetch per region and interval, for every profile's credit watch.
    credit_fetcher: CreditFetcher
    #: The admission webhooks' state (None with --webhook-mode off).
    admission: AdmissionState | None = None
    #: What wakes each profile's rollout daemon (filled at start-up, on kopf's event loop).
    rollout_wakeups: RolloutWakeups | None = None
    #: The PolicyReports' writer (None unless --policy-reports and their CRDs are served).
    policy_reports: PolicyReportPublisher | None = None
    #: Every node's mount failures, judged again every --failure-interval by ``failure_loop`` (filled at start-up).
    mount_failures: MountFailures | None = None
    failure_loop: asyncio.Task | None = None
    #: Hands each node's report to its handling at most once per --report-min-interval (filled at start-up).
    report_pacer: ReportPacer | None = None
    #: The pods each profile evicted for a stale file handle, and when (spec.remediation; filled at start-up).
    evictions: EvictionLog | None = None
    #: The inventory's loop (filled at start-up): the NetworkFileSystem objects and the baseline's findings.
    inventory: InventoryLoop | None = None
    #: What the loops of start-up handlers post Events through (kopf copies memo per object: one shared holder).
    event_context: EventContext = field(default_factory=EventContext)
    #: Whether kopf lets this replica work (mountwarden.adapters.peering.ActiveReplica with --peering): what the
    #: loops outside kopf's handlers (admission, failures, inventory) ask before they act, since kopf runs them
    #: on a paused replica too.
    replica_active: Callable[[], bool] = always_active
    #: What a handler sets to end the operator (a replica that stood down: mountwarden.handlers.standby).
    shutdown: Shutdown = field(default_factory=Shutdown)
