"""Which findings were already posted as pod Events: each is posted once, and memory stays bounded.

Report events arrive for every change of every node's report, from kopf's worker
threads, for as long as the operator runs; an unbounded set of everything ever
posted grows without end, and a check-then-add from two threads posts twice.
This one is bounded (least recently posted go first), expiring, and locked.
"""

import hashlib
import threading
import time
from collections.abc import Callable, Hashable

from cachetools import TTLCache

#: The API server keeps Events for an hour (kube-apiserver --event-ttl, 1h by default): a finding still there
#: after that is posted again, so that it stays visible.
POSTED_FINDING_TTL_SECONDS = 3600.0
#: At most this many remembered (about 200 bytes each: the message is kept as a digest).
MAX_POSTED_FINDINGS = 20_000


class PostedFindings:
    def __init__(self, maxsize: int = MAX_POSTED_FINDINGS, ttl: float = POSTED_FINDING_TTL_SECONDS,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self._posted: TTLCache = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)
        self._lock = threading.Lock()

    @staticmethod
    def key(pod_uid: str, reason: str, message: str) -> Hashable:
        return pod_uid, reason, hashlib.blake2b(message.encode(), digest_size=16).digest()

    def first_time(self, pod_uid: str, reason: str, message: str) -> bool:
        """True once per finding (until it expires or is pushed out): the caller posts it then."""
        key = self.key(pod_uid, reason, message)
        with self._lock:
            if key in self._posted:
                return False
            self._posted[key] = True
            return True

    def forget(self, pod_uid: str, reason: str, message: str) -> None:
        """Forget a finding said to be posted: its Event could not be written, the next judgement posts it."""
        with self._lock:
            self._posted.pop(self.key(pod_uid, reason, message), None)

    def __len__(self) -> int:
        with self._lock:
            self._posted.expire()
            return len(self._posted)
