"""Serving the admission webhook, and registering it with the API server when running outside a cluster.

Modes (``--webhook-mode``):

- ``local``: serve on 127.0.0.1 (or ``--webhook-host``) with a CA and certificate
  made at start, and register the ValidatingWebhookConfiguration ourselves,
  pointing at that address; withdraw it on a clean exit. One command then gives
  the whole behaviour against a dev cluster.
- ``cluster``: serve on 0.0.0.0 with the certificate mounted in
  ``--webhook-cert-dir`` and register nothing: the Helm chart owns the
  configuration (and cert-manager the certificate and the caBundle).
- ``auto``: ``cluster`` inside a pod, ``local`` elsewhere. ``off``: no webhook.

kopf could manage the configuration (``settings.admission.managed``), but it
writes timeoutSeconds 30, no namespaceSelector and one failurePolicy per
handler; the configuration here needs all three to be otherwise:

- failurePolicy Ignore for the PVC and StorageProfile webhooks that every
  request goes through: their findings are advice, and mountwarden being down
  must not stop anyone creating a PVC. StorageProfiles are Ignore too: a profile
  admitted while the operator is down is still checked by the reconciler, which
  refuses an invalid spec and says why in its Ready condition.
- one more webhook per profile with ``enforcement: deny``, failurePolicy Fail,
  scoped by that profile's own selectors: only the PVCs a deny profile governs
  are refused while the webhook cannot answer, everyone else goes through.
- timeoutSeconds 3: the answer comes from memory in well under a millisecond; a
  longer wait only delays PVC creation when the operator hangs.
- a namespaceSelector that leaves out kube-system and the operator's own
  namespace, so that neither waits on mountwarden.

kopf's webhook server re-reads its certificate files every ``file_check_interval``
seconds and restarts on a change (rotation by cert-manager, or by anyone in local
mode); each restart hands a new client config (with the new caBundle) to the
registrar here.
"""

import asyncio
import contextlib
import logging
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import kopf
import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters import certs
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL
from mountwarden.core.admission import ProfileEntry

logger = logging.getLogger(__name__)

CONFIGURATION_NAME = "mountwarden.io"
#: Handler ids of the validating handlers: kopf serves each at /<id>.
PVC_WEBHOOK = "pvc"
PROFILE_WEBHOOK = "storageprofile"
TIMEOUT_SECONDS = 3
ALWAYS_EXCLUDED_NAMESPACES = ("kube-system",)
LOCAL_HOST = "127.0.0.1"
CLUSTER_PORT = 9443
DEFAULT_CLUSTER_CERT_DIR = "/etc/mountwarden/webhook-certs"
FIELD_MANAGER = "mountwarden"

_PVC_RULE = {
    "apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumeclaims"],
    "operations": ["CREATE"], "scope": "Namespaced",
}
_PROFILE_RULE = {
    "apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [PLURAL],
    "operations": ["CREATE", "UPDATE"], "scope": "Cluster",
}


def excluded_namespaces(own_namespace: str | None) -> list[str]:
    return [*ALWAYS_EXCLUDED_NAMESPACES, *([own_namespace] if own_namespace else [])]


def _excluding(selector: Mapping | None, namespaces: Sequence[str]) -> dict:
    selector = dict(selector or {})
    selector["matchExpressions"] = [
        *(selector.get("matchExpressions") or []),
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(namespaces)},
    ]
    return selector


def _webhook(name: str, client_config: Mapping, handler: str, rule: dict, failure_policy: str) -> dict:
    url = client_config["url"].rstrip("/")
    config = {"url": f"{url}/{handler}"}
    if client_config.get("caBundle"):
        config["caBundle"] = client_config["caBundle"]
    return {
        "name": name,
        "clientConfig": config,
        "rules": [rule],
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "admissionReviewVersions": ["v1"],
    }


def render_configuration(
    client_config: Mapping, *, excluded: Sequence[str], enforcing: Sequence[ProfileEntry] = ()
) -> dict:
    """The ValidatingWebhookConfiguration for the server at ``client_config`` (kopf's url and caBundle)."""
    pvc = _webhook(f"{PVC_WEBHOOK}.{CONFIGURATION_NAME}", client_config, PVC_WEBHOOK, _PVC_RULE, "Ignore")
    pvc["namespaceSelector"] = _excluding(None, excluded)
    webhooks = [
        pvc,
        _webhook(f"{PROFILE_WEBHOOK}.{CONFIGURATION_NAME}", client_config, PROFILE_WEBHOOK, _PROFILE_RULE, "Ignore"),
    ]
    for profile in enforcing:
        # The same handler answers; the API server drops the warnings it then gets twice.
        enforce = _webhook(f"{profile.name}.enforce.{CONFIGURATION_NAME}", client_config, PVC_WEBHOOK, _PVC_RULE,
                           "Fail")
        enforce["namespaceSelector"] = _excluding(profile.namespace_selector, excluded)
        if profile.pvc_selector is not None:
            enforce["objectSelector"] = dict(profile.pvc_selector)
        webhooks.append(enforce)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/managed-by": "mountwarden"}},
        "webhooks": webhooks,
    }


class WebhookRegistrar:
    """Keeps the configuration in the cluster in step with the server's address and the deny profiles.

    Called from kopf's event loop (a new client config) and from handler threads
    (profiles changed); applies only when the rendered configuration changes.
    """

    def __init__(self, client: ApiClient, excluded: Sequence[str]) -> None:
        self.api = kubernetes.client.AdmissionregistrationV1Api(client)
        self.excluded = list(excluded)
        self._lock = threading.Lock()
        self._client_config: Mapping | None = None
        self._enforcing: list[ProfileEntry] = []
        self._applied: dict | None = None

    def serving(self, client_config: Mapping) -> None:
        with self._lock:
            self._client_config = dict(client_config)
            self._apply()

    def enforce(self, profiles: Sequence[ProfileEntry]) -> None:
        with self._lock:
            self._enforcing = list(profiles)
            self._apply()

    def _apply(self) -> None:
        if self._client_config is None:
            return  # not serving yet: nothing to point the API server at
        body = render_configuration(self._client_config, excluded=self.excluded, enforcing=self._enforcing)
        if body == self._applied:
            return
        # Server-side apply: creates or updates in one call, and drops webhooks of profiles gone from deny.
        self.api.patch_validating_webhook_configuration(
            CONFIGURATION_NAME, body, field_manager=FIELD_MANAGER, force=True,
            _content_type="application/apply-patch+yaml",
        )
        self._applied = body
        logger.info(f"registered ValidatingWebhookConfiguration {CONFIGURATION_NAME} at {self._client_config['url']} "
                    f"({len(self._enforcing)} deny profile(s) enforced with failurePolicy Fail)")

    def withdraw(self) -> None:
        """Remove the configuration: a stopped local operator leaves nothing that points at it."""
        with self._lock:
            if self._applied is None:
                return
            try:
                self.api.delete_validating_webhook_configuration(CONFIGURATION_NAME, _request_timeout=10)
            except ApiException as error:
                if error.status != 404:
                    raise
            self._applied = None
            logger.info(f"withdrew ValidatingWebhookConfiguration {CONFIGURATION_NAME}")


class RegisteringWebhookServer(kopf.WebhookServer):
    """kopf's HTTPS server that also registers itself, at start and after every certificate change."""

    def __init__(self, *, registrar: WebhookRegistrar, scratch: tempfile.TemporaryDirectory | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.registrar = registrar
        self.scratch = scratch

    async def __call__(self, fn) -> AsyncIterator[dict]:
        try:
            async for client_config in super().__call__(fn):
                await asyncio.to_thread(self.registrar.serving, client_config)
                yield client_config
        finally:
            # Synchronous on purpose: during shutdown this task is being cancelled, and an await could be cut short.
            try:
                self.registrar.withdraw()
            except Exception:  # the API may be gone first; exiting matters more than tidying up
                logger.exception(f"could not withdraw ValidatingWebhookConfiguration {CONFIGURATION_NAME}")
            if self.scratch is not None:
                self.scratch.cleanup()


def free_port(host: str) -> int:
    with contextlib.closing(socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def local_server(registrar: WebhookRegistrar, *, host: str, port: int | None, cert_dir: str | None,
                 file_check_interval: float = 60.0) -> RegisteringWebhookServer:
    """Serve on ``host``; the certificate is made in ``cert_dir`` (kept if still good) or in a scratch directory."""
    scratch = None
    if cert_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="mountwarden-webhook-")
        paths = certs.issue(Path(scratch.name), [host])
    else:
        paths = certs.ensure(Path(cert_dir), [host])
    # Loopback stays loopback; any other name means the API server is elsewhere (a kind node, a VM).
    addr = host if host in (LOCAL_HOST, "localhost", "::1") else "0.0.0.0"
    return RegisteringWebhookServer(
        registrar=registrar, scratch=scratch, addr=addr, host=host,
        # A fixed port: kopf restarts the server when the certificate changes, and the URL must not move.
        port=port or free_port(addr),
        certfile=paths.cert, pkeyfile=paths.key, cafile=paths.ca, file_check_interval=file_check_interval,
    )


def cluster_server(*, port: int | None, cert_dir: str | None) -> kopf.WebhookServer:
    paths = certs.require(Path(cert_dir or DEFAULT_CLUSTER_CERT_DIR))
    return kopf.WebhookServer(addr="0.0.0.0", port=port or CLUSTER_PORT, certfile=paths.cert, pkeyfile=paths.key,
                              cafile=paths.ca)
