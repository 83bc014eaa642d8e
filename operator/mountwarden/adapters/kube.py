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
