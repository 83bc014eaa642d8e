"""How handler failures reach kopf: transient API errors retry with backoff, never get swallowed."""

import functools
from collections.abc import Callable
from typing import Any

import kopf

from mountwarden.adapters.kube import TransientApiError

MAX_BACKOFF_SECONDS = 60.0


def backoff(retry: int) -> float:
    return min(2.0 ** retry, MAX_BACKOFF_SECONDS)


def retry_transient(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Re-raise TransientApiError as kopf.TemporaryError with an exponential delay."""

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except TransientApiError as error:
            raise kopf.TemporaryError(str(error), delay=backoff(int(kwargs.get("retry") or 0))) from error

    return wrapper
