"""Kubernetes-style status conditions, kept as plain dictionaries (their wire form)."""

from datetime import UTC, datetime
from typing import Literal


def set_condition(
    conditions: list[dict], type_: str, status: Literal["True", "False", "Unknown"], reason: str, message: str,
    generation: int | None, now: datetime | None = None,
) -> list[dict]:
    """Conditions with one set in place (appended when new); lastTransitionTime moves only on a status change."""
    now = now or datetime.now(UTC)
    previous = next((c for c in conditions if c.get("type") == type_), None)
    transition = (
        previous["lastTransitionTime"]
        if previous and previous.get("status") == status and previous.get("lastTransitionTime")
        else now.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    updated = {
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        updated["observedGeneration"] = generation
    if previous is None:
        return [*conditions, updated]
    return [updated if c is previous else c for c in conditions]


def find_condition(conditions: list[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
