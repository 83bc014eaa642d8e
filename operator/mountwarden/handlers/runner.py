"""Run the operator: kopf with mountwarden's handlers, settings and clients (mountwarden.handlers.context)."""

import asyncio
import logging
import os
import re
import sys
from datetime import timedelta

import kopf

from mountwarden.adapters.finalizers import FINALIZER
from mountwarden.adapters.kube import ProfileConditions, StorageClasses, api_client
from mountwarden.adapters.peering import ActiveReplica
from mountwarden.adapters.pods import PodPlacements
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import KIND, PLURAL
from mountwarden.handlers import metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.kopfpatch import wake_waiters_only_on_flips
from mountwarden.handlers.native_heap import limit_arenas, map_large_blocks_apart
from mountwarden.handlers.posted import PostedFindings

PREFIX = "mountwarden.io"
#: The GIL's switch interval (CPython's default is 5 ms): how long a thread that wants the GIL waits for the one
#: running a pass (the inventory, an assessment) to hand it over. The webhook's event loop gives the GIL away at
#: each wait for I/O, so a review waited several intervals behind a pass. At 1 ms, under the scale load, the
#: operator's own p99 per review went from 9.3 to 4.4 ms and its slowest from 242 to 43 ms (one traced run each,
#: bench/results/scale_webhook_profile.txt, runs F and G). It helps only where passes run Python: a 0.5 ms interval
#: gained nothing while one json.dumps of 50 ms in C held the GIL (run E and the try after it).
SWITCH_INTERVAL_SECONDS = 0.001


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
    settings.persistence.finalizer = FINALIZER  # the one `mountwarden cleanup` removes after an uninstall
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


def login(memo: OperatorContext, **kwargs) -> kopf.ConnectionInfo | None:
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
    from mountwarden.handlers import (
        admission,
        credits,
        failures,
        indexes,
        inventory,
        policyreports,
        profiles,
        remediation,
        reportpace,
        reports,
        rollouts,
        standby,
    )

    registry = registry if registry is not None else kopf.OperatorRegistry()
    kopf.on.startup(registry=registry)(configure)
    kopf.on.login(registry=registry)(login)
    for module in (indexes, profiles, reports, reportpace, failures, remediation, rollouts, credits, admission, policyreports,
                   inventory, standby):
        module.register(registry, config)
    return registry


def run(config: OperatorConfig, *, standalone: bool = True, liveness_endpoint: str | None = None,
        peering_name: str | None = None, priority: int = 0) -> None:
    limit_arenas()  # before the watches' and the webhook's threads make arenas of their own
    map_large_blocks_apart()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    registry = register_handlers(config)
    wake_waiters_only_on_flips()
    quiet_routine_lines()
    from mountwarden.handlers.credits import CreditFetcher
    from mountwarden.handlers.indexes import cluster_watches

    client = api_client(config.kubeconfig)
    posted = PostedFindings()
    metrics.POSTED_FINDINGS.set_function(lambda: len(posted))
    watches = cluster_watches(client, config.network_provisioners)
    memo = OperatorContext(
        config=config,
        kube_client=client,
        storage_classes=StorageClasses(client),
        conditions=ProfileConditions(client, GROUP, VERSION, PLURAL, KIND),
        posted_findings=posted,
        watches=watches,
        pods=PodPlacements(watches.pods),
        credit_fetcher=CreditFetcher(timedelta(seconds=config.credit_interval)),
    )
    if not standalone:
        memo.replica_active = ActiveReplica(client, peering_name=peering_name, priority=priority,
                                            identity=os.environ.get("POD_ID"))
    metrics.serve(config.metrics_port)
    asyncio.run(kopf.operator(
        registry=registry,
        clusterwide=True,
        standalone=standalone,
        peering_name=peering_name,
        priority=priority,
        liveness_endpoint=liveness_endpoint,
        memo=memo,
        stop_flag=memo.shutdown.flag,
    ))
    if memo.shutdown.reason is not None:
        logging.getLogger(__name__).warning("stopped: %s (exit status %d)", memo.shutdown.reason,
                                            memo.shutdown.exit_code)
        raise SystemExit(memo.shutdown.exit_code)
