"""What `mountwarden inventory` reads from a cluster, without the operator: StorageClasses, PersistentVolumes,
pods, NodeMountReports and StorageProfiles, listed once and turned into the core's ClusterFacts (the operator
builds the same from its indexes: mountwarden.handlers.inventory)."""

import json
from collections import defaultdict
from collections.abc import Collection

import kubernetes
from kubernetes.client import ApiClient, ApiException
from pydantic import ValidationError

from mountwarden.adapters.kube import transient_errors
from mountwarden.adapters.pods import PodPlacement, placements_of_list
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import UnreadableReport, read_node_report
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.api.storageprofile import StorageProfileSpec, adopter_of, contract_of
from mountwarden.core.inventory import ClusterFacts
from mountwarden.core.networkstorage import NetworkVolume
from mountwarden.core.node.report import of_own_pods
from mountwarden.core.storageclass import ClassEntry


def _items(response) -> list[dict]:
    return json.loads(response.data)["items"]


def _served_items(custom: kubernetes.client.CustomObjectsApi, plural: str) -> list[dict]:
    """The objects of one of mountwarden's resources; none before mountwarden is installed (its CRDs not served)."""
    try:
        return custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
    except ApiException as error:
        if error.status == 404:
            return []
        raise


def read_facts(client: ApiClient, network_provisioners: Collection[str] = ()) -> ClusterFacts:
    """Everything the inventory needs, listed from the API (one list per resource)."""
    core = kubernetes.client.CoreV1Api(client)
    storage = kubernetes.client.StorageV1Api(client)
    custom = kubernetes.client.CustomObjectsApi(client)
    with transient_errors():
        classes = [ClassEntry.from_object(obj) for obj in _items(storage.list_storage_class(_preload_content=False))]
        pvs = _items(core.list_persistent_volume(_preload_content=False))
        pods = placements_of_list(core.list_pod_for_all_namespaces(_preload_content=False).data)
        reports = _served_items(custom, REPORTS)
        profiles = _served_items(custom, PROFILES)

    by_uid = {pod.uid: pod for pod in pods}
    by_claim: dict[tuple[str, str], list[PodPlacement]] = defaultdict(list)
    for pod in pods:
        for claim in pod.claims:
            by_claim[(pod.namespace, claim)].append(pod)

    def node_of(uid: str) -> str | None:
        pod = by_uid.get(uid)
        return (pod.node or "") if pod is not None else None

    node_reports = {}
    for obj in reports:
        try:
            report = read_node_report(obj["metadata"]["name"], obj.get("spec") or {})
        except UnreadableReport:
            continue
        node_reports[report.node] = of_own_pods(report, node_of)[0]

    contracts, adopters = {}, []
    for obj in profiles:
        name, meta = obj["metadata"]["name"], obj["metadata"]
        try:
            spec = StorageProfileSpec.model_validate(obj.get("spec") or {})
        except ValidationError:
            continue  # an invalid profile governs nothing (its Ready condition says why)
        policy = spec.resolve()
        if not policy.valid:
            continue
        contracts[name] = contract_of(spec, policy, obj.get("status"))
        adopter = adopter_of(name, spec, meta.get("creationTimestamp"), obj.get("status"))
        if adopter.adopts:
            adopters.append(adopter)

    volumes = [found for pv in pvs if (found := NetworkVolume.from_object(pv, network_provisioners)) is not None]
    by_name = {pv["metadata"]["name"]: pv for pv in pvs}

    def reported_volume(name: str) -> NetworkVolume | None:
        # A report shows it mounted as NFS: whatever its CSI driver, it is network storage.
        pv = by_name.get(name)
        driver = ((pv or {}).get("spec") or {}).get("csi", {}).get("driver")
        return NetworkVolume.from_object(pv, (driver,)) if pv is not None and driver else None

    return ClusterFacts(classes=classes, volumes=volumes, pods_of_claim=lambda ns, claim: by_claim.get((ns, claim), []),
                        pod_of_uid=by_uid.get, reports=node_reports, contracts=contracts, adopters=adopters,
                        reported_volume=reported_volume, network_provisioners=tuple(network_provisioners))
