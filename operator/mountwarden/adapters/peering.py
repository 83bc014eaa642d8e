"""Which replica kopf lets work: read from kopf's peering object, the way kopf reads it.

Replicas share one kopf peering object; kopf pauses every replica but the one of
the highest priority (all of them when the highest is shared). A paused replica
stops watching, so its indexes are empty or stale: only the active one may answer
admission requests.

kopf keeps its own verdict in a toggle inside its reactor, which it exposes to
no handler. So this module reads the peering object itself, parsing each peer
with kopf's own ``Peer`` class (kopf._core.engines.peering) so that the object's
format is kopf's, and applies the rule of kopf's ``process_peering_event``:
paused while another live peer has a priority as high or higher.
tests/unit/test_peering.py holds this to kopf's own function on the same objects.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import kubernetes
import urllib3
from kopf._core.engines.peering import Identity, Peer
from kubernetes.client import ApiClient, ApiException

logger = logging.getLogger(__name__)

#: kopf's cluster-wide peering objects.
PEERING = ("kopf.dev", "v1", "clusterkopfpeerings")


def replica_active(peers: Mapping[str, Mapping | None], *, priority: int, identity: str | None,
                   now: datetime) -> bool:
    """Whether kopf, reading the peering object's ``status``, lets the replica of ``priority`` (and
    ``identity``, when known) work: no other live peer has a priority as high. Without an identity, one peer
    of the same priority is taken to be this replica."""
    alive = []
    for peer_id, fields in peers.items():
        if not isinstance(fields, Mapping):
            continue  # removed: kopf writes null for a peer that left
        peer = Peer(identity=Identity(peer_id), **fields)
        # kopf reads a peer without lastseen as seen at the moment it reads it.
        seen = peer.lastseen if fields.get("lastseen") is not None else now
        if seen + peer.lifetime > now:
            alive.append((peer_id, int(peer.priority)))
    if identity is not None:
        others = [p for peer_id, p in alive if peer_id != identity]
    else:
        others = [p for _, p in alive]
        if priority in others:
            others.remove(priority)
    return all(p < priority for p in others)


class ActiveReplica:
    """Whether kopf lets this replica work, judged from the peering object as kopf judges it.

    Read on demand (the active-label loop, a change of deny profiles), at most
    every ``max_age`` seconds. Without the peering object kopf stays paused: not active.
    When the API cannot be read, the last answer stands.
    """

    def __init__(self, client: ApiClient, *, peering_name: str, priority: int, identity: str | None,
                 max_age: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)
        self.peering_name = peering_name
        self.priority = priority
        self.identity = identity
        self.max_age = max_age
        self.clock = clock
        self._lock = threading.Lock()
        self._checked_at: float | None = None
        self._active = False

    def __call__(self) -> bool:
        with self._lock:
            now = self.clock()
            if self._checked_at is None or now - self._checked_at >= self.max_age:
                self._active = self._read(self._active)
                self._checked_at = now
            return self._active

    def _read(self, last: bool) -> bool:
        try:
            peering = self.api.get_cluster_custom_object(*PEERING, self.peering_name, _request_timeout=5)
        except ApiException as error:
            if error.status == 404:
                return False
            logger.warning(f"cannot read ClusterKopfPeering {self.peering_name} ({error.status} {error.reason}): "
                           f"keeping the last answer ({'active' if last else 'standby'})")
            return last
        except (OSError, urllib3.exceptions.HTTPError) as error:  # no connection, a timeout
            logger.warning(f"cannot read ClusterKopfPeering {self.peering_name} ({error}): keeping the last answer")
            return last
        return replica_active(peering.get("status") or {}, priority=self.priority, identity=self.identity,
                              now=datetime.now(UTC))
