"""Run the operator: kopf with mountwarden's handlers, settings and clients."""

import asyncio
import logging
import os
from datetime import timedelta

import kopf

from mountwarden.adapters.kube import ProfileConditions, StorageClasses, api_client
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import KIND, PLURAL
from mountwarden.handlers import metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.posted import PostedFindings

PREFIX = "mountwarden.io"


def wake_waiters_only_on_flips() -> None:
    """Make kopf's start-up linear in the number of objects instead of quadratic.

    While kopf fills its indexes, every object has a toggle in one set, drops it once
    indexed, then waits for the whole set; each drop woke every waiting task although the
    set's state (all indexed or not) flips only once: 3,000 objects took 45 s, 25,000 would
    take hours. Waiters check only that state, so waking them only when it flips is exact.
    """
    from kopf._cogs.aiokits import aiotoggles

    toggle_set = aiotoggles.ToggleSet
    if getattr(toggle_set, "wakes_only_on_flips", False):
        return

    async def make_toggle(self, __val: bool = False, *, name: str | None = None):
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != before:
                self._condition.notify_all()
        return toggle

    async def drop_toggles(self, toggles) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.difference_update(toggles)
            if self.is_on() != before:
                self._condition.notify_all()

    async def drop_toggle(self, toggle) -> None:
        await drop_toggles(self, [toggle])

    toggle_set.make_toggle = make_toggle
    toggle_set.drop_toggles = drop_toggles
    toggle_set.drop_toggle = drop_toggle
    toggle_set.wakes_only_on_flips = True


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


def login(memo: kopf.Memo, **kwargs) -> kopf.ConnectionInfo | None:
    """Log kopf in with the same credentials as the operator's own client.

    kopf's default login reads $KUBECONFIG only when the client library is first
    imported; --kubeconfig must win whenever it is given.
    """
    if memo.config.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return kopf.login_with_service_account(**kwargs)
    configuration = memo.kube_client.configuration
    header = configuration.get_api_key_with_prefix("BearerToken") or configuration.get_api_key_with_prefix(
        "authorization"
    )
    scheme, _, token = (header or "").partition(" ")
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def register_handlers(config: OperatorConfig, registry: kopf.OperatorRegistry | None = None) -> kopf.OperatorRegistry:
    """Every handler of the operator, registered with the intervals and modes of ``config``."""
    from mountwarden.handlers import admission, credits, indexes, policyreports, profiles, reports, rollouts

    registry = registry if registry is not None else kopf.OperatorRegistry()
    kopf.on.startup(registry=registry)(configure)
    kopf.on.login(registry=registry)(login)
    for module in (indexes, profiles, reports, rollouts, credits, admission, policyreports):
        module.register(registry, config)
    return registry


def run(config: OperatorConfig, *, standalone: bool = True, liveness_endpoint: str | None = None,
        peering_name: str | None = None, priority: int = 0) -> None:
    registry = register_handlers(config)
    wake_waiters_only_on_flips()
    from mountwarden.handlers.credits import CreditFetcher

    client = api_client(config.kubeconfig)
    posted = PostedFindings()
    metrics.POSTED_FINDINGS.set_function(lambda: len(posted))
    memo = kopf.Memo(
        config=config,
        kube_client=client,
        storage_classes=StorageClasses(client),
        conditions=ProfileConditions(client, GROUP, VERSION, PLURAL, KIND),
        posted_findings=posted,
        credit_fetcher=CreditFetcher(timedelta(seconds=config.credit_interval)),
    )
    metrics.serve(config.metrics_port)
    asyncio.run(kopf.operator(
        registry=registry,
        clusterwide=True,
        standalone=standalone,
        peering_name=peering_name,
        priority=priority,
        liveness_endpoint=liveness_endpoint,
        memo=memo,
    ))
