"""Serving the admission webhook, and registering it with the API server when running outside a cluster.

Modes (``--webhook-mode``):

- ``local``: serve on 127.0.0.1 (or ``--webhook-host``) with a CA and certificate
  made at start, and register the ValidatingWebhookConfiguration ourselves,
  pointing at that address; withdraw it on a clean exit. One command then gives
  the whole behaviour against a dev cluster. Every webhook registered this way is
  failurePolicy Ignore, deny profiles' included: a lone process outside the
  cluster can be killed (``kill -9``, a closed laptop) without a chance to
  withdraw anything, and nothing restarts it, so whatever it registered must
  block nobody once it is gone. Denials hold while it answers.
- ``cluster``: serve on 0.0.0.0 with the certificate mounted in
  ``--webhook-cert-dir``; the Helm chart owns the configuration (and its
  caBundle, or cert-manager does). The per-profile deny webhooks below depend
  on the profiles, which no chart can know: given ``--enforce-configuration``
  and ``--webhook-service``, the operator keeps them in a second, otherwise
  empty configuration that the chart creates (so that uninstalling removes
  it), through the Service. Only the active replica writes it.
- ``auto``: ``cluster`` inside a pod, ``local`` elsewhere. ``off``: no webhook.

kopf could manage the configuration (``settings.admission.managed``), but it
writes timeoutSeconds 30, no namespaceSelector and one failurePolicy per
handler; the configuration here needs all three to be otherwise:

- failurePolicy Ignore for the PVC and StorageProfile webhooks that every
  request goes through: their findings are advice, and mountwarden being down
  must not stop anyone creating a PVC. StorageProfiles are Ignore too: a profile
  admitted while the operator is down is still checked by the reconciler, which
  refuses an invalid spec and says why in its Ready condition.
- in a cluster, one more webhook per profile with ``enforcement: deny``,
  failurePolicy Fail, scoped by that profile's own selectors: only the PVCs a
  deny profile governs are refused while the webhook cannot answer, everyone
  else goes through. Fail-closed webhooks only where a Deployment keeps
  replicas behind a Service.
- timeoutSeconds 3: the answer comes from memory in well under a millisecond; a
  longer wait only delays PVC creation when the operator hangs.
- a namespaceSelector that leaves out kube-system, the operator's own
  namespace and those named by ``--exempt-namespace``, so that none waits on
  mountwarden; and any namespace labelled ``mountwarden.io/exempt: "true"``
  (EXEMPT_LABEL), for whoever may label namespaces to take one out without
  redeploying. Both go into the PVC webhook and into every deny profile's
  failurePolicy Fail webhook: an exempt namespace is never refused because
  mountwarden is down. (A namespaceSelector never skips a cluster-scoped
  object, so the StorageProfile and NodeMountReport webhooks have none.)
- with an agent service account (``--agent-service-account``): a webhook on
  NodeMountReports (failurePolicy Fail in a cluster, Ignore locally), which a
  matchCondition limits to that service account's requests: the agent may write
  only its own node's report (mountwarden.core.admission.review_report_write);
  nobody else's writes call it.

A review that fails inside the operator (a bug, or indexes not filled yet) is
answered with an HTTP error, never with a verdict: the API server then applies
the failurePolicy of the webhook that called, so a claim only a warning webhook
sees goes through, and one a deny profile's webhook sees is refused.

kopf's webhook server re-reads its certificate files every ``file_check_interval``
seconds and restarts on a change (rotation by cert-manager, or by anyone in local
mode); each restart hands a new client config (with the new caBundle) to the
registrar here.
"""

import asyncio
import contextlib
import json
import logging
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import aiohttp.web
import kopf
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters import certfiles
from mountwarden.adapters.rest import APPLY, JSON_PATCH, Rest, path
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.storageprofile import PLURAL
from mountwarden.core.admission import ProfileEntry

logger = logging.getLogger(__name__)

CONFIGURATION_NAME = "mountwarden.io"
#: Handler ids of the validating handlers: kopf serves each at /<id>.
PVC_WEBHOOK = "pvc"
PROFILE_WEBHOOK = "storageprofile"
REPORT_WEBHOOK = "nodemountreport"
TIMEOUT_SECONDS = 3
ALWAYS_EXCLUDED_NAMESPACES = ("kube-system",)
#: A namespace with this label set to "true" calls none of mountwarden's PVC webhooks (the chart writes the same
#: key: mountwarden.exemptLabel in charts/mountwarden/templates/_helpers.tpl).
EXEMPT_LABEL = "mountwarden.io/exempt"
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

_REPORT_RULE = {
    "apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [REPORTS],
    "operations": ["CREATE", "UPDATE"], "scope": "Cluster",
}
#: The port of the webhook Service the chart makes (the API server's default for a service reference).
SERVICE_PORT = 443


def excluded_namespaces(own_namespace: str | None, exempt: Sequence[str] = ()) -> list[str]:
    """kube-system, the operator's own namespace and the exempt ones, each once, in that order."""
    names = [*ALWAYS_EXCLUDED_NAMESPACES, *([own_namespace] if own_namespace else []), *exempt]
    return list(dict.fromkeys(names))


def _excluding(selector: Mapping | None, namespaces: Sequence[str]) -> dict:
    """``selector`` narrowed to namespaces not named in ``namespaces`` and not labelled exempt (NotIn also matches
    a namespace without the label)."""
    selector = dict(selector or {})
    selector["matchExpressions"] = [
        *(selector.get("matchExpressions") or []),
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(namespaces)},
        {"key": EXEMPT_LABEL, "operator": "NotIn", "values": ["true"]},
    ]
    return selector


def parse_service(reference: str) -> dict:
    """``namespace/name`` (or ``namespace/name:port``) as a webhook clientConfig's service reference."""
    namespace, _, rest = reference.partition("/")
    name, _, port = rest.partition(":")
    if not namespace or not name or (port and not port.isdigit()):
        raise ValueError(f"expected the webhook Service as NAMESPACE/NAME[:PORT], got {reference!r}")
    return {"namespace": namespace, "name": name, "port": int(port) if port else SERVICE_PORT}


def _webhook(name: str, client_config: Mapping, handler: str, rule: dict, failure_policy: str) -> dict:
    if "service" in client_config:  # in a cluster: the API server finds the operator through its Service
        config: dict = {"service": {**client_config["service"], "path": f"/{handler}"}}
    else:
        config = {"url": f"{client_config['url'].rstrip('/')}/{handler}"}
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


def report_webhook(client_config: Mapping, agent_username: str, *, fail_closed: bool = True) -> dict:
    """A security check, failurePolicy Fail where replicas serve it. The matchCondition keeps everyone but the agent
    from calling it."""
    report = _webhook(f"{REPORT_WEBHOOK}.{CONFIGURATION_NAME}", client_config, REPORT_WEBHOOK, _REPORT_RULE,
                      "Fail" if fail_closed else "Ignore")
    report["matchConditions"] = [
        {"name": "node-agent", "expression": f"request.userInfo.username == {json.dumps(agent_username)}"},
    ]
    return report


def enforce_webhook_name(profile: str) -> str:
    return f"{profile}.enforce.{CONFIGURATION_NAME}"


def enforce_webhooks(client_config: Mapping, *, excluded: Sequence[str],
                     enforcing: Sequence[ProfileEntry]) -> list[dict]:
    """One failurePolicy Fail webhook per deny profile, scoped by that profile's own selectors."""
    webhooks = []
    for profile in enforcing:
        # The same handler answers; the API server drops the warnings it then gets twice.
        enforce = _webhook(enforce_webhook_name(profile.name), client_config, PVC_WEBHOOK, _PVC_RULE, "Fail")
        enforce["namespaceSelector"] = _excluding(profile.namespace_selector, excluded)
        if profile.pvc_selector is not None:
            enforce["objectSelector"] = dict(profile.pvc_selector)
        webhooks.append(enforce)
    return webhooks


def _configuration(name: str, webhooks: list[dict], labels: Mapping[str, str] | None = None) -> dict:
    metadata: dict = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": webhooks,
    }


def render_configuration(
    client_config: Mapping, *, excluded: Sequence[str], agent_username: str | None = None, fail_closed: bool,
) -> dict:
    """The ValidatingWebhookConfiguration for the server at ``client_config`` (kopf's url and caBundle).

    ``fail_closed``: the report check is failurePolicy Fail; only where replicas behind a Service answer (the
    chart renders this one). Without it (one process outside the cluster) every webhook is Ignore.
    """
    pvc = _webhook(f"{PVC_WEBHOOK}.{CONFIGURATION_NAME}", client_config, PVC_WEBHOOK, _PVC_RULE, "Ignore")
    pvc["namespaceSelector"] = _excluding(None, excluded)
    webhooks = [
        pvc,
        _webhook(f"{PROFILE_WEBHOOK}.{CONFIGURATION_NAME}", client_config, PROFILE_WEBHOOK, _PROFILE_RULE, "Ignore"),
    ]
    if agent_username is not None:
        webhooks.append(report_webhook(client_config, agent_username, fail_closed=fail_closed))
    return _configuration(CONFIGURATION_NAME, webhooks, {"app.kubernetes.io/managed-by": "mountwarden"})


def render_enforcement(client_config: Mapping, *, name: str, excluded: Sequence[str],
                       enforcing: Sequence[ProfileEntry]) -> dict:
    """In a cluster: only the deny profiles' webhooks, applied into the configuration ``name`` the chart made.

    No labels: the chart's own stay as Helm set them (server-side apply touches only the fields named here).
    """
    return _configuration(name, enforce_webhooks(client_config, excluded=excluded, enforcing=enforcing))


#: Seconds between the registrar's checks that the configuration in the cluster is still what it wrote.
REPAIR_SECONDS = 30.0


def stale_webhooks(written: Mapping, live: Mapping | None) -> list[tuple[int, str]]:
    """(index, name) of the webhooks of mountwarden's in ``live`` that it did not write, last first: server-side
    apply leaves a webhook another field manager took over (a deleted deny profile's Fail webhook, edited by
    someone), so it is removed by name."""
    wanted = {hook["name"] for hook in written.get("webhooks") or []}
    found = [(index, str(hook.get("name"))) for index, hook in enumerate((live or {}).get("webhooks") or [])]
    return [(index, name) for index, name in reversed(found)
            if name not in wanted and name.endswith(f".{CONFIGURATION_NAME}")]


#: Called with each deny profile whose enforcement changed: name -> (enforced, what the API server said).
EnforcementReport = Callable[[dict[str, tuple[bool, str]]], None]


class WebhookRegistrar:
    """Keeps the configuration in the cluster in step with the server's address and the deny profiles.

    Called from kopf's event loop (a new client config), from handler threads
    (profiles changed) and from a repair loop (keep_webhooks); applies only when the
    rendered configuration changes, or (repair) to undo what others changed of it.

    Locally it owns the whole configuration, failurePolicy Ignore throughout: deny
    profiles' denials come from the PVC webhook while the process answers. In a
    cluster (``enforcement_configuration`` given) it owns only the deny webhooks
    (failurePolicy Fail), in the configuration of that name, and writes them only
    once it has seen the profiles and while ``is_active()``: a standby replica knows
    no profiles and must not empty what the active one wrote.

    One profile's webhook that the API server refuses (a selector it rejects) must not
    cost the others theirs: when the whole write is refused, each profile's webhook is
    tried alone (a server-side dry run), the refused ones are left out and reported
    (``report``), and the rest is written.
    """

    def __init__(self, client: ApiClient, excluded: Sequence[str], *, agent_username: str | None = None,
                 enforcement_configuration: str | None = None,
                 is_active: Callable[[], bool] | None = None, report: EnforcementReport | None = None) -> None:
        self.rest = Rest(client)
        self.excluded = list(excluded)
        self.agent_username = agent_username
        self.enforcement_configuration = enforcement_configuration
        self.is_active = is_active or (lambda: True)
        self.report = report
        self._lock = threading.Lock()
        self._client_config: Mapping | None = None
        self._enforcing: list[ProfileEntry] | None = None if enforcement_configuration else []
        #: What was rendered from every profile, and what of it the API server took (the refused left out).
        self._applied: dict | None = None
        self._written: dict | None = None
        #: The configuration's resourceVersion after mountwarden's last write: another means someone edited it.
        self._version: str | None = None
        #: Deny profiles the API server refused, with its reason; and what was last reported of each.
        self.refused: dict[str, str] = {}
        self._reported: dict[str, tuple[bool, str]] = {}
        #: Withdrawn on the way out: a profile event handled meanwhile must not register it again.
        self._closed = False

    @property
    def name(self) -> str:
        return self.enforcement_configuration or CONFIGURATION_NAME

    def _path(self) -> str:
        return path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", self.name)

    def serving(self, client_config: Mapping) -> None:
        with self._lock:
            self._client_config = dict(client_config)
            self._apply()

    def enforce(self, profiles: Sequence[ProfileEntry]) -> None:
        with self._lock:
            self._enforcing = list(profiles)
            self._apply()

    def refresh(self) -> None:
        """Write again whatever is due (this replica just became the active one)."""
        with self._lock:
            self._applied = None
            self._apply()

    def repair(self) -> bool:
        """Undo outside edits and retry a failed write: the last written configuration applied again (server-side
        apply changes nothing when nothing drifted), then mountwarden's webhooks it did not write removed. Only
        patch, the one verb RBAC grants on the enforce configuration. True if the configuration had drifted."""
        with self._lock:
            if self._client_config is None or self._enforcing is None or self._closed or not self.is_active():
                return False
            if self._written is None:  # the last write failed (or none was made): make it again
                self._applied = None
                return self._apply()
            if not self._written.get("webhooks"):
                # No deny profile: nothing of ours to apply again, and applying nothing is never a no-op (the API
                # server stores the object anew each time), so look, and remove what should not be there.
                live = self._read()
                drifted = bool(stale_webhooks(self._written, live))
                self._remove_stale(live)
                return drifted
            version = self._version
            live = self._write(self._written)
            self._remove_stale(live)
            if live is None or version is None or live["metadata"].get("resourceVersion") == version:
                return False
            logger.warning(f"ValidatingWebhookConfiguration {self.name} was changed by someone else: "
                           "mountwarden's webhooks written again")
            return True

    def _read(self) -> dict | None:
        """The configuration as stored, through patch (the one verb RBAC grants on it): a JSON patch that only tests
        the name, which changes nothing."""
        return self.rest.patch(self._path(), [{"op": "test", "path": "/metadata/name", "value": self.name}],
                               content_type=JSON_PATCH, timeout=10)

    def _remove_stale(self, live: Mapping | None) -> None:
        assert self._written is not None
        stale = stale_webhooks(self._written, live)
        if not stale:
            return
        logger.warning(f"ValidatingWebhookConfiguration {self.name}: removing webhooks mountwarden did not write: "
                       f"{', '.join(name for _, name in stale)}")
        patch = [op for index, name in stale for op in (
            {"op": "test", "path": f"/webhooks/{index}/name", "value": name},
            {"op": "remove", "path": f"/webhooks/{index}"})]
        stored = self.rest.patch(self._path(), patch, content_type=JSON_PATCH, timeout=10)
        self._version = _resource_version(stored)

    def _render(self, enforcing: list[ProfileEntry]) -> dict:
        assert self._client_config is not None
        if self.enforcement_configuration:
            return render_enforcement(self._client_config, name=self.enforcement_configuration,
                                      excluded=self.excluded, enforcing=enforcing)
        return render_configuration(self._client_config, excluded=self.excluded, agent_username=self.agent_username,
                                    fail_closed=False)

    def _write(self, body: dict, *, dry_run: bool = False) -> dict | None:
        """The configuration as the API server stored it (None from a client that returns nothing)."""
        # Server-side apply: creates or updates in one call, and drops webhooks of profiles gone from deny.
        # In a cluster the configuration exists (the chart made it) and RBAC allows patching it alone.
        stored = self.rest.patch(self._path(), body, content_type=APPLY, query={
            "fieldManager": FIELD_MANAGER, "force": True, "dryRun": "All" if dry_run else None})
        if not dry_run:
            self._version = (stored or {}).get("metadata", {}).get("resourceVersion")
        return stored

    def _sift(self, enforcing: list[ProfileEntry]) -> tuple[list[ProfileEntry], dict[str, str]]:
        """Each profile's webhook tried alone: (those the API server takes, the refused with its reason)."""
        accepted, refused = [], {}
        for profile in enforcing:
            try:
                self._write(self._render([profile]), dry_run=True)
            except ApiException as error:
                if error.status not in (400, 422):
                    raise
                refused[profile.name] = _api_message(error)
                continue
            accepted.append(profile)
        return accepted, refused

    def _apply(self) -> bool:
        if self._client_config is None or self._enforcing is None or self._closed:
            return False  # not serving (yet, or any more), or the profiles are not known yet
        body = self._render(self._enforcing)
        if body == self._applied or not self.is_active():
            return False
        enforcing, refused = self._enforcing, {}
        self._written = None  # until this write succeeds, the repair loop writes again
        try:
            self._write(body)
        except ApiException as error:
            if not self.enforcement_configuration or error.status not in (400, 422):
                raise
            enforcing, refused = self._sift(self._enforcing)
            self._write(self._render(enforcing))
        self._applied, self._written = body, self._render(enforcing)
        self._report(enforcing, refused)
        if self.enforcement_configuration:
            logger.info(f"registered ValidatingWebhookConfiguration {self.name} through the webhook Service "
                        f"({len(enforcing)} deny profile(s) enforced with failurePolicy Fail"
                        + (f"; refused by the API server: {', '.join(sorted(refused))})" if refused else ")"))
        else:
            logger.info(f"registered ValidatingWebhookConfiguration {self.name} at {self._client_config.get('url')} "
                        "(failurePolicy Ignore: deny profiles are enforced while this process answers; once it is "
                        "gone, even by kill -9, nothing waits on it)")
        return True

    def _report(self, enforcing: list[ProfileEntry], refused: dict[str, str]) -> None:
        self.refused = refused
        if not self.enforcement_configuration:
            return
        now = {profile.name: (True, f"webhook {enforce_webhook_name(profile.name)} (failurePolicy Fail) is in "
                                    f"ValidatingWebhookConfiguration {self.name}") for profile in enforcing}
        for name, reason in refused.items():
            logger.error(f"StorageProfile {name}: the API server refused its deny webhook: {reason}")
            now[name] = (False, f"the API server refused this profile's deny webhook, so its PVCs are not refused "
                                f"while mountwarden is down: {reason}; fix spec.consumers' selectors")
        changed = {name: state for name, state in now.items() if self._reported.get(name) != state}
        self._reported = now
        if changed and self.report is not None:
            try:
                self.report(changed)
            except Exception:  # the webhooks are written; their report is told again at the next change
                logger.exception("could not report the deny webhooks' state on the profiles")
                self._reported = {name: state for name, state in now.items() if name not in changed}

    def withdraw(self) -> None:
        """Remove the configuration: a stopped local operator leaves nothing that points at it."""
        with self._lock:
            self._closed = True
            if self._applied is None and self._version is None:  # nothing was ever written
                return
            try:
                self.rest.delete(self._path(), timeout=10)
            except ApiException as error:
                if error.status != 404:
                    raise
            self._applied = self._version = None
            logger.info(f"withdrew ValidatingWebhookConfiguration {self.name}")


def _resource_version(stored: Mapping | None) -> str | None:
    return (stored or {}).get("metadata", {}).get("resourceVersion")


def _api_message(error: ApiException) -> str:
    """The API server's own words for a refused request."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.body or error.reason)


def keep_webhooks(registrar: WebhookRegistrar, stop: threading.Event, interval: float = REPAIR_SECONDS) -> None:
    """Until ``stop``: undo outside edits of the configuration and retry a write that failed."""
    while not stop.wait(interval):
        try:
            registrar.repair()
        except Exception:  # the API is unreachable for a moment: try again at the next tick
            logger.exception(f"could not check ValidatingWebhookConfiguration {registrar.name}")


def failures_as_http_errors(fn: Callable) -> Callable:
    """kopf's webhook function, with a failed review turned from a verdict into an HTTP 500.

    kopf answers a handler's unexpected exception with ``allowed: false`` and code 500, a
    denial the API server obeys whatever the webhook's failurePolicy. As an HTTP error
    it is a failure to call the webhook instead, and the failurePolicy applies: a
    warning webhook (Ignore) lets the request through, a deny profile's (Fail) refuses.
    Denials mountwarden means (kopf.AdmissionError, code 403) pass unchanged.
    """

    async def serve(request: Mapping, **kwargs) -> Mapping:
        answer = await fn(request, **kwargs)
        response = answer.get("response") or {}
        status = response.get("status") or {}
        if not response.get("allowed", True) and int(status.get("code") or 0) >= 500:
            raise aiohttp.web.HTTPInternalServerError(text=str(status.get("message") or "the review failed"))
        return answer

    return serve


class WebhookServer(kopf.WebhookServer):
    """kopf's HTTPS server, answering a failed review with an HTTP error (see failures_as_http_errors)."""

    async def __call__(self, fn) -> AsyncIterator[dict]:
        async for client_config in super().__call__(failures_as_http_errors(fn)):
            yield client_config


class RegisteringWebhookServer(WebhookServer):
    """The HTTPS server that also registers itself, at start and after every certificate change."""

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
        paths = certfiles.make(Path(scratch.name), [host], keep_good=False)
    else:
        paths = certfiles.make(Path(cert_dir), [host], keep_good=True)
    # Loopback stays loopback; any other name means the API server is elsewhere (a kind node, a VM).
    addr = host if host in (LOCAL_HOST, "localhost", "::1") else "0.0.0.0"
    return RegisteringWebhookServer(
        registrar=registrar, scratch=scratch, addr=addr, host=host,
        # A fixed port: kopf restarts the server when the certificate changes, and the URL must not move.
        port=port or free_port(addr),
        certfile=paths.cert, pkeyfile=paths.key, cafile=paths.ca, file_check_interval=file_check_interval,
    )


class EnforcingWebhookServer(WebhookServer):
    """In a cluster: kopf's server, handing the deny webhooks' registrar the Service and the current caBundle.

    Nothing is withdrawn on exit: another replica takes over, and Helm deletes the configuration on uninstall.
    """

    def __init__(self, *, registrar: WebhookRegistrar, service: Mapping, **kwargs) -> None:
        super().__init__(**kwargs)
        self.registrar = registrar
        self.service = dict(service)

    async def __call__(self, fn) -> AsyncIterator[dict]:
        async for client_config in super().__call__(fn):
            config = {"service": self.service}
            if client_config.get("caBundle"):
                config["caBundle"] = client_config["caBundle"]
            try:
                await asyncio.to_thread(self.registrar.serving, config)
            except ApiException:  # the webhooks are written again at the next profile change
                logger.exception(f"could not write the deny webhooks into {self.registrar.name}")
            yield client_config


def cluster_server(*, port: int | None, cert_dir: str | None, registrar: WebhookRegistrar | None = None,
                   service: Mapping | None = None) -> WebhookServer:
    paths = certfiles.require(Path(cert_dir or DEFAULT_CLUSTER_CERT_DIR))
    options = dict(addr="0.0.0.0", port=port or CLUSTER_PORT, certfile=paths.cert, pkeyfile=paths.key,
                   cafile=paths.ca)
    if registrar is not None and service is not None:
        return EnforcingWebhookServer(registrar=registrar, service=service, **options)
    return WebhookServer(**options)


class ActivePodLabel:
    """Puts a label on this replica's own pod while it can answer admission, and takes it off otherwise.

    The webhook Service selects that label: a paused kopf peer watches nothing, so its
    indexes are empty or stale, and the API server must not ask it. (A readiness probe
    cannot say this: a standby that is never ready stalls every rolling update.)
    """

    def __init__(self, client: ApiClient, *, namespace: str, pod: str, key: str) -> None:
        self.rest = Rest(client)
        self.namespace, self.pod, self.key = namespace, pod, key
        self._written: bool | None = None

    def set(self, active: bool) -> bool:
        """Write the label if it differs from what was last written (always, the first time); True if written."""
        if active == self._written:
            return False
        body = {"metadata": {"labels": {self.key: "true" if active else None}}}
        self.rest.patch(path("v1", "pods", self.pod, namespace=self.namespace), body, timeout=10)
        self._written = active
        logger.info(f"pod {self.namespace}/{self.pod}: {self.key} {'set' if active else 'removed'}: "
                    f"{'the webhook Service routes here' if active else 'not the active replica'}")
        return True
