"""Evict the pods on a stale file handle, for the profiles that ask (spec.remediation.staleFileHandle: Evict).

A timer per such profile, every few seconds (a refused eviction is asked again that often, as a rollout
asks): the profile's pods among the nodes' StaleFileHandle failures (mountwarden.handlers.failures), the
pure choice of the next one (mountwarden.core.remediation: one at a time, once per window, never a pod no
controller recreates) and the rollout's own eviction (mountwarden.adapters.workloads: the Eviction API,
with the pod's UID as a precondition, so that PodDisruptionBudgets hold and a pod recreated under the same
name is never the one evicted). Every eviction is an Event on the profile and on the pod, and counted in
``mountwarden_stale_handle_evictions_total``; a refusal too, once per pod.
"""

import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import kopf
from pydantic import ValidationError

from mountwarden.adapters.pods import PodPlacements
from mountwarden.adapters.watches import with_cluster_indexes
from mountwarden.adapters.workloads import ClusterWorkloads
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL, StorageProfileSpec
from mountwarden.core.findings import Finding, Reason
from mountwarden.core.remediation import StalePod, next_eviction
from mountwarden.core.rollout import RemountPod
from mountwarden.core.vocabulary import StaleHandleRemedy
from mountwarden.handlers import metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.indexes import one
from mountwarden.handlers.rollouts import EVICTION_RETRY_SECONDS

PROFILE = (GROUP, VERSION, PLURAL)
log = logging.getLogger(__name__)


class EvictionLog:
    """Per profile: which pods' evictions were accepted, and when (kept one window, then forgotten)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._evicted: dict[str, dict[str, datetime]] = {}

    def of(self, profile: str, *, now: datetime, window: timedelta) -> dict[str, datetime]:
        with self._lock:
            kept = {uid: at for uid, at in self._evicted.get(profile, {}).items() if now - at < window}
            self._evicted[profile] = kept
            return dict(kept)

    def record(self, profile: str, uid: str, at: datetime) -> None:
        with self._lock:
            self._evicted.setdefault(profile, {})[uid] = at

    def forget(self, profile: str) -> None:
        with self._lock:
            self._evicted.pop(profile, None)


def evicts(spec: kopf.Spec, **_) -> bool:
    remediation = (spec or {}).get("remediation") or {}
    return remediation.get("staleFileHandle") == StaleHandleRemedy.EVICT


def stale_pods_of(profile: str, failures: Iterable[Finding], pods: PodPlacements, claims_by_volume: kopf.Index,
                  classes_by_name: kopf.Index) -> list[StalePod]:
    """The pods on a stale file handle whose volume (a PV) belongs to a class of ``profile``."""
    found = {}
    for finding in failures:
        subject = finding.subject
        if subject is None or subject.kind != "Pod" or not subject.uid:
            continue
        volume = one(claims_by_volume, finding.evidence.get("volume", ""))
        storage_class = one(classes_by_name, volume.get("storageClass")) if volume else None
        pod = pods.get(subject.uid)
        if storage_class is None or storage_class.profile != profile or pod is None:
            continue
        found[pod.uid] = StalePod(pod.uid, pod.namespace, pod.name, finding.evidence.get("volume", ""),
                                  finding.evidence.get("node", ""), pod.controlled)
    return list(found.values())


def _pod_body(pod: StalePod) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod.name, "namespace": pod.namespace,
                                                           "uid": pod.uid}}


@with_cluster_indexes
def remediate(name: str, spec: kopf.Spec, body: kopf.Body, memo: OperatorContext, claims_by_volume: kopf.Index,
              classes_by_name: kopf.Index, **_) -> None:
    """Evict the next pod of this profile on a stale file handle, if the last one evicted is gone."""
    try:
        remediation = StorageProfileSpec.model_validate(dict(spec)).remediation
    except ValidationError:
        return  # the profile's Ready condition says why
    if remediation.stale_file_handle != StaleHandleRemedy.EVICT or memo.mount_failures is None:
        return
    now, window = datetime.now(UTC), timedelta(seconds=remediation.window_seconds)
    stale = stale_pods_of(name, memo.mount_failures.found(Reason.STALE_FILE_HANDLE), memo.pods, claims_by_volume,
                          classes_by_name)
    evicted = memo.evictions.of(name, now=now, window=window)
    decision = next_eviction(stale, evicted, {uid for uid in evicted if memo.pods.get(uid) is not None},
                             now=now, window=window)
    for pod in decision.uncontrolled:
        message = (f"pod {pod.namespace}/{pod.name} is on a stale file handle (volume {pod.volume} on node "
                   f"{pod.node}) but no controller would recreate it: it is not evicted. Restart it yourself.")
        if memo.posted_findings.first_time(pod.uid, "StaleHandleNotEvicted", message):
            kopf.warn(_pod_body(pod), reason="StaleHandleNotEvicted", message=message)
    if decision.evict is None:
        if decision.waiting and stale:
            log.debug("StorageProfile %s: %s", name, decision.waiting)
        return
    pod = decision.evict
    refusal = ClusterWorkloads(memo.kube_client).remount(RemountPod(pod.namespace, pod.name, pod.uid))
    if refusal is not None:
        if memo.posted_findings.first_time(pod.uid, "EvictionRefused", refusal.message):
            metrics.STALE_HANDLE_EVICTIONS.labels(name, "refused").inc()
            kopf.warn(body, reason="EvictionRefused", message=f"{refusal} (it is on a stale file handle; asked again "
                                                              f"every {EVICTION_RETRY_SECONDS:.0f} s)")
            log.info("StorageProfile %s: EvictionRefused: %s", name, refusal)
        return
    memo.evictions.record(name, pod.uid, now)
    metrics.STALE_HANDLE_EVICTIONS.labels(name, "evicted").inc()
    message = (f"evicted pod {pod.namespace}/{pod.name}: its volume {pod.volume} on node {pod.node} has a stale file "
               "handle (StaleFileHandle); its controller recreates it and the new pod mounts afresh "
               "(spec.remediation.staleFileHandle: Evict)")
    kopf.info(body, reason="StaleHandleEvicted", message=message)
    kopf.info(_pod_body(pod), reason="StaleHandleEvicted", message=message)
    log.info("StorageProfile %s: StaleHandleEvicted: %s", name, message)


def start_evictions(memo: OperatorContext, **_) -> None:
    memo.evictions = EvictionLog()


def forget_profile(name: str, type: str, memo: OperatorContext, **_) -> None:
    if type == "DELETED" and memo.evictions is not None:
        memo.evictions.forget(name)


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.startup(registry=registry)(start_evictions)
    kopf.timer(*PROFILE, interval=EVICTION_RETRY_SECONDS, when=evicts, registry=registry)(remediate)
    kopf.on.event(*PROFILE, registry=registry)(forget_profile)
