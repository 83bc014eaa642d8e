"""How often the operator handles each node's report: at most once per interval, the latest one.

Every write of a NodeMountReport makes the operator judge each mount in it (drift and health Events, the
node's failures, a rollout's verification). The API server lets a node write only its own report (RBAC, the
admission policy), not decide how often: a broken or hostile agent writing in a loop would make the operator
judge as often. So a node's writes are paced: the first after a quiet interval is handled at once; those that
follow within the interval are coalesced, and only the latest is handled when the interval has passed. A report
is the node's whole state, so the latest says everything the skipped ones said.

Pure bookkeeping on a monotonic clock the caller gives; the handlers schedule the deferred handling.
"""

from dataclasses import dataclass, field
from enum import Enum


class Admission(Enum):
    #: Handle this report now (recorded as the node's last handling).
    NOW = "now"
    #: Handle the node's latest report after ``Pace.arrive``'s delay: the caller schedules it, then calls ``due``.
    LATER = "later"
    #: A handling is already scheduled: it will take this report, as the latest, when its time comes.
    COALESCED = "coalesced"


@dataclass
class Pace:
    """Per node: when its report was last handled, and whether a later handling is scheduled."""

    #: Seconds that must pass between two handlings of one node's report.
    min_interval: float
    _handled_at: dict[str, float] = field(default_factory=dict)
    _scheduled: set[str] = field(default_factory=set)

    def arrive(self, node: str, now: float) -> tuple[Admission, float]:
        """A report of ``node`` arrived at ``now``: what to do, and in how many seconds (0 unless LATER)."""
        if node in self._scheduled:
            return Admission.COALESCED, 0.0
        last = self._handled_at.get(node)
        if last is None or now - last >= self.min_interval:
            self._handled_at[node] = now
            return Admission.NOW, 0.0
        self._scheduled.add(node)
        return Admission.LATER, self.min_interval - (now - last)

    def due(self, node: str, now: float) -> None:
        """The scheduled handling of ``node`` starts now."""
        self._scheduled.discard(node)
        self._handled_at[node] = now

    def forget(self, node: str) -> None:
        """The node's report is gone (deleted, and that handled): nothing kept about it."""
        if node not in self._scheduled:
            self._handled_at.pop(node, None)

    @property
    def scheduled(self) -> frozenset[str]:
        return frozenset(self._scheduled)

    def __len__(self) -> int:
        return len(self._handled_at)
