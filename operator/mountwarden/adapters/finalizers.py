"""Releasing mountwarden's finalizers when no operator is left to do it (after `helm uninstall`).

kopf puts mountwarden's finalizer on every object it handles, so that the operator can
tidy up before the object goes (a profile's unused StorageClasses). With the operator
gone nothing removes it, and deleting the object waits forever. This removes it, and
nothing else: the StorageClasses a profile made stay (kubectl delete them by the label
mountwarden.io/profile once their volumes are gone).
"""

from collections.abc import Iterator
from dataclasses import dataclass

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.networkfilesystem import PLURAL as FILE_SYSTEMS
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.storageprofile import PLURAL as PROFILES

#: The finalizer the operator's kopf settings use (mountwarden.handlers.runner takes it from here).
FINALIZER = f"{GROUP}/finalizer"
#: Every resource of mountwarden's, cluster-scoped, whose objects may carry it.
RESOURCES = (PROFILES, REPORTS, FILE_SYSTEMS)


@dataclass(frozen=True)
class Released:
    resource: str
    name: str
    #: Whether the object was being deleted: releasing the finalizer lets it go at once.
    deleting: bool

    def to_dict(self) -> dict:
        return {"resource": f"{self.resource}.{GROUP}", "name": self.name, "deleting": self.deleting}


def release_finalizers(client: ApiClient, *, dry_run: bool = False) -> Iterator[Released]:
    """Remove mountwarden's finalizer from every object of its resources that has it; yield each one."""
    api = kubernetes.client.CustomObjectsApi(client)
    for resource in RESOURCES:
        try:
            listing = api.list_cluster_custom_object(GROUP, VERSION, resource)
        except ApiException as error:
            if error.status == 404:  # the CRD is gone already: so are its objects
                continue
            raise
        for obj in listing.get("items") or []:
            metadata = obj["metadata"]
            finalizers = list(metadata.get("finalizers") or [])
            if FINALIZER not in finalizers:
                continue
            if not dry_run:
                # Guarded by the list read: a finalizer someone else adds meanwhile fails the test, never lost.
                patch = [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                         {"op": "replace", "path": "/metadata/finalizers",
                          "value": [name for name in finalizers if name != FINALIZER]}]
                try:
                    api.patch_cluster_custom_object(GROUP, VERSION, resource, metadata["name"], patch,
                                                    _content_type="application/json-patch+json")
                except ApiException as error:
                    if error.status == 404:  # gone meanwhile
                        continue
                    raise
            yield Released(resource, metadata["name"], bool(metadata.get("deletionTimestamp")))
