"""Run the operator: kopf with mountwarden's handlers, settings and clients."""

import ast
import asyncio
import hashlib
import inspect
import logging
import os
import re
from datetime import timedelta

import kopf

from mountwarden.adapters.kube import ProfileConditions, StorageClasses, api_client
from mountwarden.adapters.pods import PodPlacements
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import KIND, PLURAL
from mountwarden.handlers import metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.posted import PostedFindings

PREFIX = "mountwarden.io"


#: The kopf release whose ToggleSet the patch below was written against (pyproject.toml pins it exactly).
KOPF_PINNED = "1.45.2"
#: The ToggleSet methods the patch replaces or relies on (its waiters' predicate), and the SHA-256 of their
#: source in KOPF_PINNED. A kopf whose methods differ is left unpatched: slower to start, never wrong.
TOGGLESET_METHODS = ("is_on", "wait_for", "make_toggle", "drop_toggle", "drop_toggles")
TOGGLESET_SOURCE_SHA256 = "7f8e4740dcc92350ace57c6429e103ce4f15a6191beee4d4651f20e5f101fccb"


def toggleset_source_digest() -> str:
    """SHA-256 of the source of kopf's own ToggleSet methods (read from its module file: patched or not)."""
    from kopf._cogs.aiokits import aiotoggles

    source = inspect.getsource(aiotoggles)
    toggle_set = next(node for node in ast.parse(source).body
                      if isinstance(node, ast.ClassDef) and node.name == "ToggleSet")
    methods = {node.name: node for node in toggle_set.body
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    digest = hashlib.sha256()
    for name in TOGGLESET_METHODS:
        segment = ast.get_source_segment(source, methods[name]) if name in methods else ""
        digest.update(f"{name}\0{segment}\0".encode())
    return digest.hexdigest()


def wake_waiters_only_on_flips() -> bool:
    """Make kopf's start-up linear in the number of objects instead of quadratic; False when not applied.

    While kopf fills its indexes, every object has a toggle in one set, drops it once
    indexed, then waits for the whole set; each drop woke every waiting task although the
    set's state (all indexed or not) flips only once: 3,000 objects took 45 s, 25,000 would
    take hours. Waiters check only that state, so waking them only when it flips is exact.
    The patch touches kopf's private ToggleSet, so it applies only to the source it was
    written against (docs/upstream/kopf-toggleset.md has the measurements and the fix for kopf).
    """
    from kopf._cogs.aiokits import aiotoggles

    toggle_set = aiotoggles.ToggleSet
    if getattr(toggle_set, "wakes_only_on_flips", False):
        return True
    if toggleset_source_digest() != TOGGLESET_SOURCE_SHA256:
        logging.getLogger(__name__).warning(
            "kopf %s's ToggleSet is not the one of kopf %s that mountwarden patches: running unpatched (start-up "
            "with many objects is slower; see docs/upstream/kopf-toggleset.md)", kopf.__version__, KOPF_PINNED)
        return False

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
    return True


#: What kopf logs at INFO every time a handler ran fine: per timer tick, per index update, per unchanged
#: reconcile. Each change the operator makes is logged (and posted as an Event) by its handler instead.
ROUTINE_KOPF_LINES = re.compile(
    r"(?:(?:Handler|Timer|Indexer|Daemon|Activity|Webhook) '[^']*' succeeded"
    r"|\w+ is processed: \d+ succeeded; 0 failed)\.")


class RoutineLines(logging.Filter):
    """Let kopf's routine success lines through only when debugging (--verbose): the log says what changed.

    On kopf's object logger this also keeps them from being posted as Kubernetes Events.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and ROUTINE_KOPF_LINES.fullmatch(record.getMessage()):
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def quiet_routine_lines() -> None:
    # aiohttp logs every webhook request (one line per PVC created in the cluster, and a twelfth of the
    # webhook's time): errors only.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    routine = RoutineLines()
    for name in ("kopf.objects", *(f"kopf.activities.{activity}" for activity in
                                   ("startup", "cleanup", "authentication", "probe"))):
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RoutineLines) for existing in logger.filters):
            logger.addFilter(routine)


def configure(settings: kopf.OperatorSettings, **_) -> None:
    # Progress and the last-handled spec live in annotations: the status schema is
    # structural, so kopf's default status fields would be pruned.
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    # Lists in pages: at start, kopf then holds one page of a resource at a time, not all of it.
    settings.watching.chunk_size = 500
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
    quiet_routine_lines()
    from mountwarden.handlers.credits import CreditFetcher
    from mountwarden.handlers.indexes import cluster_watches

    client = api_client(config.kubeconfig)
    posted = PostedFindings()
    metrics.POSTED_FINDINGS.set_function(lambda: len(posted))
    watches = cluster_watches(client)
    memo = kopf.Memo(
        config=config,
        kube_client=client,
        storage_classes=StorageClasses(client),
        conditions=ProfileConditions(client, GROUP, VERSION, PLURAL, KIND),
        posted_findings=posted,
        watches=watches,
        pods=PodPlacements(watches.pods),
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
