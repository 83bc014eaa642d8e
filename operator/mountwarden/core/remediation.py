"""What mountwarden may do by itself about a broken mount: evict the pods on a stale file handle, one at a time.

Opt-in per profile (spec.remediation.staleFileHandle: Evict). A stale handle never heals: the pod must mount
the volume again, and an eviction lets its controller recreate it, which mounts afresh (the kernel looks the
export's path up again). So the safe remedy is a rollout's own remount: the Eviction API (PodDisruptionBudgets
hold), and here also one pod of the profile at a time (the next only once the last evicted one is gone), each
pod at most once per window (one that does not go is not asked again), and never a pod no controller
recreates. Nothing is done about the other failures: each needs a person, and says what to do.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class StalePod:
    """A pod whose volume has a stale file handle."""

    uid: str
    namespace: str
    name: str
    volume: str
    node: str
    #: Whether a controller recreates it once evicted.
    controlled: bool


@dataclass(frozen=True, slots=True)
class Decision:
    #: The pod to evict now, if any.
    evict: StalePod | None
    #: Why nothing is evicted now, for the log (empty when a pod is evicted or none is stale).
    waiting: str = ""
    #: Stale pods left alone for good: no controller would recreate them.
    uncontrolled: tuple[StalePod, ...] = ()


def next_eviction(stale: Sequence[StalePod], evicted: Mapping[str, datetime], exists: set[str], *,
                  now: datetime, window: timedelta) -> Decision:
    """The next stale pod to evict: none while a pod evicted within the window still exists.

    ``evicted``: pod UID -> when its eviction was accepted; ``exists``: the UIDs of the pods that exist now.
    """
    recent = {uid: at for uid, at in evicted.items() if now - at < window}
    uncontrolled = tuple(pod for pod in stale if not pod.controlled)
    in_flight = sorted(uid for uid in recent if uid in exists)
    if in_flight:
        return Decision(None, f"pod UID {in_flight[0]}, evicted at {recent[in_flight[0]]:%H:%M:%SZ}, is not gone yet: "
                              "one pod at a time", uncontrolled)
    candidates = sorted((pod for pod in stale if pod.controlled and pod.uid not in recent),
                        key=lambda pod: (pod.namespace, pod.name, pod.uid))
    return Decision(candidates[0] if candidates else None, "", uncontrolled)
