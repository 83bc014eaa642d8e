"""Run the operator: kopf with mountwarden's handlers, settings and clients."""

import asyncio
import logging
import os

import kopf

from mountwarden.adapters.kube import StorageClasses, api_client
from mountwarden.handlers.config import OperatorConfig

PREFIX = "mountwarden.io"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    # Progress and the last-handled spec live in annotations: the status schema is
    # structural, so kopf's default status fields would be pruned.
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60


def register_handlers() -> None:
    """Import the handler modules; importing registers them with kopf."""
    import mountwarden.handlers.profiles  # noqa: F401


def run(config: OperatorConfig, *, standalone: bool = True, liveness_endpoint: str | None = None,
        peering_name: str | None = None, priority: int = 0) -> None:
    if config.kubeconfig:
        os.environ["KUBECONFIG"] = config.kubeconfig  # kopf's own login reads it too
    register_handlers()
    client = api_client(config.kubeconfig)
    memo = kopf.Memo(config=config, storage_classes=StorageClasses(client))
    asyncio.run(kopf.operator(
        clusterwide=True,
        standalone=standalone,
        peering_name=peering_name,
        priority=priority,
        liveness_endpoint=liveness_endpoint,
        memo=memo,
    ))
