"""How handler failures reach kopf: transient API errors retry with backoff, never get swallowed."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf

from mountwarden.adapters.kube import TransientApiError

MAX_BACKOFF_SECONDS = 60.0
#: A guarded write refused with 409 Conflict: the object changed since it was read, and reading it again settles
#: that. So a conflict is retried at once: always when writes went in before it (the retry has less to do, so
#: retries cannot loop), and otherwise up to five in a row, as client-go's retry.RetryOnConflict does
#: (retry.DefaultRetry: 5 steps, 10 ms apart); only those beyond count as failures and back off.
CONFLICT = 409
CONFLICT_RETRIES = 5


def backoff(retry: int) -> float:
    return min(2.0 ** retry, MAX_BACKOFF_SECONDS)


@dataclass(frozen=True)
class Retries:
    """A loop's failures in a row, and how long to wait after the next one.

    A rollout tick refused on a PV the PV controller was binding at the same moment backed off 2, 4, 8 and
    16 s (30 s of a 70 s change in bench/scale.py) though nothing was failing: each tick had patched hundreds of
    PVs before the refusal, and each retry read the cluster again and moved on."""

    failures: int = 0
    conflicts: int = 0

    def after(self, error: Exception) -> tuple["Retries", float]:
        """The count after ``error``, and the seconds to wait before trying again (any error but a conflict backs
        off, a bug's as a failing server's)."""
        conflict = isinstance(error, TransientApiError) and error.status == CONFLICT
        if conflict and error.performed:
            return Retries(self.failures, 0), 0.0
        if conflict and self.conflicts < CONFLICT_RETRIES:
            return Retries(self.failures, self.conflicts + 1), 0.0
        failures = self.failures + 1
        return Retries(failures, self.conflicts), backoff(failures)


def retry_transient(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Re-raise TransientApiError as kopf.TemporaryError with an exponential delay."""

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except TransientApiError as error:
            raise kopf.TemporaryError(str(error), delay=backoff(int(kwargs.get("retry") or 0))) from error

    return wrapper
