"""The Kubernetes API, as the operator uses it: a client from a kubeconfig and typed errors.

Handlers are synchronous functions that kopf runs in worker threads, so the
synchronous official client is the right tool; kopf keeps its own async client
for watching.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime

import kubernetes
import urllib3
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.rest import Rest, path
from mountwarden.core.conditions import set_condition

#: Status codes worth retrying: conflicts, throttling, server trouble (0: no connection).
TRANSIENT_STATUSES = frozenset({0, 409, 429, 500, 502, 503, 504})


class TransientApiError(RuntimeError):
    """The API refused for a reason that passes: retry later."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status}: {message}")
        self.status = status
        #: Writes of the same batch that went in before this one was refused (set by who performs the batch).
        self.performed = 0


def api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """A client from the in-cluster service account, or from a kubeconfig outside a cluster."""
    configuration = kubernetes.client.Configuration()
    if kubeconfig is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
            return ApiClient(configuration)
        except kubernetes.config.ConfigException:
            pass  # not in a pod: fall back to $KUBECONFIG or ~/.kube/config
    kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return ApiClient(configuration)


@contextmanager
def transient_errors() -> Iterator[None]:
    """Turn retryable API errors into TransientApiError; let the others through."""
    try:
        yield
    except ApiException as error:
        if error.status in TRANSIENT_STATUSES or (error.status or 0) >= 500:
            raise TransientApiError(error.status or 0, error.reason or str(error)) from error
        raise
    except urllib3.exceptions.HTTPError as error:  # refused, reset, timed out, cut short: the client raises these
        raise TransientApiError(0, f"no whole answer ({type(error).__name__}: {error})") from error


#: (apiVersion, plural) of StorageClasses.
STORAGE_CLASSES = ("storage.k8s.io/v1", "storageclasses")


class StorageClasses:
    """StorageClasses of profiles' lineages, in their wire (dict) form."""

    def __init__(self, client: ApiClient) -> None:
        self.rest = Rest(client)

    def list(self, label_selector: str) -> list[dict]:
        with transient_errors():
            return self.rest.get(path(*STORAGE_CLASSES), query={"labelSelector": label_selector})["items"]

    def create(self, body: dict) -> dict:
        with transient_errors():
            return self.rest.post(path(*STORAGE_CLASSES), body)

    def patch(self, name: str, body: dict) -> None:
        with transient_errors():
            self.rest.patch(path(*STORAGE_CLASSES, name), body)

    def delete(self, name: str) -> None:
        """Delete; a class that is already gone is fine (deletes are repeated after crashes)."""
        try:
            with transient_errors():
                self.rest.delete(path(*STORAGE_CLASSES, name))
        except ApiException as error:
            if error.status != 404:
                raise


class ProfileConditions:
    """Writes one condition of a StorageProfile by server-side apply, never touching the others'.

    Several handlers own conditions of one profile (Ready, Compliant, CreditsDraining).
    The CRD declares status.conditions a list-map keyed by type, so each writer applies
    only its own entry under a field manager of its own (``mountwarden-<writer>``) and
    the API server merges: no read first, no resourceVersion, no retry on conflict.
    A writer applies the same set of fields every time: a field it applied once and
    leaves out later would be removed.
    """

    def __init__(self, client: ApiClient, group: str, version: str, plural: str, kind: str) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)
        self.resource = (group, version, plural)
        self.api_version, self.kind = f"{group}/{version}", kind

    def set(self, name: str, type_: str, status: str, reason: str, message: str, generation: int | None,
            *, writer: str, current: Mapping | None, also: dict | None = None) -> None:
        """Set one condition; ``also`` are status fields the same writer applies in the same request, so that
        nobody sees the condition without the fields it speaks of (Ready without storageClassName).

        ``current`` is the profile's status as the handler was given it: lastTransitionTime is kept from it while
        the condition's status stays, and nothing is written when nothing would change.
        """
        current = current or {}
        conditions = list(current.get("conditions") or [])
        updated = set_condition(conditions, type_, status, reason, message, generation)
        condition = next(c for c in updated if c["type"] == type_)
        if condition in conditions and all(current.get(key) == value for key, value in (also or {}).items()):
            return
        body = {"apiVersion": self.api_version, "kind": self.kind, "metadata": {"name": name},
                "status": {**(also or {}), "conditions": [condition]}}
        with transient_errors():
            self.api.patch_cluster_custom_object_status(
                *self.resource, name, body, field_manager=f"mountwarden-{writer}", force=True,
                _content_type="application/apply-patch+yaml")


def warn_node(client: ApiClient, node: str, reason: str, message: str, *, component: str = "mountwarden") -> None:
    """A Warning Event on a Node, written as the kubelet writes its own (involvedObject uid = the node's name, no
    namespace), so that `kubectl describe node` shows it; kopf's Events give a cluster-scoped object a namespace,
    which describe does not match."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{node}."},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": reason, "message": message[:1024], "type": "Warning", "count": 1, "firstTimestamp": now,
        "lastTimestamp": now, "source": {"component": component},
        "reportingComponent": component, "reportingInstance": component,
    }
    with transient_errors():
        Rest(client).post(path("v1", "events", namespace="default"), event)
