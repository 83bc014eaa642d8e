"""NetworkFileSystem objects on the API: which ones the operator wrote, and writing or deleting one whole object
(the core takes the inventory: mountwarden.core.inventory; mountwarden.api.networkfilesystem shapes the object)."""

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.kube import transient_errors
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.networkfilesystem import LABELS, PLURAL

_SELECTOR = ",".join(f"{key}={value}" for key, value in LABELS.items())


class NetworkFileSystems:
    def __init__(self, client: ApiClient) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)

    def existing(self) -> set[str]:
        """The names of the objects mountwarden wrote (by their label)."""
        with transient_errors():
            listed = self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector=_SELECTOR)
        return {item["metadata"]["name"] for item in listed["items"]}

    def write(self, body: dict) -> None:
        """Create the object, or replace its spec (a merge patch replaces lists whole; ``omitted`` is cleared)."""
        name = body["metadata"]["name"]
        change = {"metadata": {"labels": body["metadata"]["labels"]},
                  "spec": {**body["spec"], "omitted": body["spec"].get("omitted")}}
        try:
            with transient_errors():
                self.api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, change)
            return
        except ApiException as error:
            if error.status != 404:
                raise
        with transient_errors():
            self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

    def delete(self, name: str) -> None:
        try:
            with transient_errors():
                self.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException as error:
            if error.status != 404:
                raise
