"""Operator settings that handlers read from kopf's memo."""

from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorConfig:
    kubeconfig: str | None = None
