"""The Kubernetes API, as the operator uses it: a client from a kubeconfig and typed errors.

Handlers are synchronous functions that kopf runs in worker threads, so the
synchronous official client is the right tool; kopf keeps its own async client
for watching.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.core.conditions import set_condition

#: Status codes worth retrying: conflicts, throttling, server trouble (0: no connection).
TRANSIENT_STATUSES = frozenset({0, 409, 429, 500, 502, 503, 504})


class TransientApiError(RuntimeError):
    """The API refused for a reason that passes: retry later."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status}: {message}")
        self.status = status


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


def _json(response) -> dict:
    return json.loads(response.data)


class StorageClasses:
    """StorageClasses of profiles' lineages, in their wire (dict) form."""

    def __init__(self, client: ApiClient) -> None:
        self.api = kubernetes.client.StorageV1Api(client)

    def list(self, label_selector: str) -> list[dict]:
        with transient_errors():
            return _json(self.api.list_storage_class(label_selector=label_selector, _preload_content=False))["items"]

    def create(self, body: dict) -> dict:
        with transient_errors():
            return _json(self.api.create_storage_class(body, _preload_content=False))

    def patch(self, name: str, body: dict) -> None:
        with transient_errors():
            self.api.patch_storage_class(name, body)

    def delete(self, name: str) -> None:
        """Delete; a class that is already gone is fine (deletes are repeated after crashes)."""
        try:
            with transient_errors():
                self.api.delete_storage_class(name)
        except ApiException as error:
            if error.status != 404:
                raise


class ProfileConditions:
    """Writes one condition of a StorageProfile without losing the others'.

    Several handlers own conditions of one profile (Ready, CreditsDraining,
    Compliant) and a merge patch replaces the whole list, so each write reads the
    current list and patches it under the object's resourceVersion, retrying on
    conflict.
    """

    def __init__(self, client: ApiClient, group: str, version: str, plural: str) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)
        self.resource = (group, version, plural)

    def set(self, name: str, type_: str, status: str, reason: str, message: str, generation: int | None,
            *, also: dict | None = None, attempts: int = 5) -> None:
        """Set one condition; ``also`` are status fields written in the same patch, so that nobody
        sees the condition without the fields it speaks of (Ready without storageClassName)."""
        for attempt in range(attempts):
            with transient_errors():
                current = self.api.get_cluster_custom_object(*self.resource, name)
            conditions = (current.get("status") or {}).get("conditions") or []
            updated = set_condition(list(conditions), type_, status, reason, message, generation)
            unchanged = all((current.get("status") or {}).get(key) == value for key, value in (also or {}).items())
            if updated == conditions and unchanged:
                return
            body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                    "status": {**(also or {}), "conditions": updated}}
            try:
                with transient_errors():
                    self.api.patch_cluster_custom_object_status(*self.resource, name, body)
                return
            except TransientApiError as error:
                if error.status != 409 or attempt == attempts - 1:
                    raise
