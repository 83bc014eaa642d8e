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
    #: The pods each profile evicted for a stale file handle, and when (spec.remediation; filled at start-up).
    evictions: EvictionLog | None = None
    #: The inventory's loop (filled at start-up): the NetworkFileSystem objects and the baseline's findings.
    inventory: InventoryLoop | None = None
    #: What the loops of start-up handlers post Events through (kopf copies memo per object: one shared holder).
    event_context: EventContext = field(default_factory=EventContext)
