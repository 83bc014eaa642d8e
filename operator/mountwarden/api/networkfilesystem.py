"""NetworkFileSystem: the operator's view of one file system on network storage (cluster-scoped, one per file system).

Written only by the operator, from its inventory (mountwarden.core.inventory), whether or not any
StorageProfile exists: the classes and volumes on that EFS file system or NFS server, their claims,
pods and nodes, which profile governs each (or none), the options in the class, in the PV and in
effect on the nodes, where they disagree, and every finding on its volumes (a profile's, or the
baseline's). ``kubectl get netfs`` lists them; ``mountwarden inventory`` prints the same from the
objects themselves, without the operator.
"""

import itertools
import json
import math
from collections.abc import Callable, Iterable
from datetime import datetime

from pydantic import Field

from mountwarden.api.base import API_VERSION, ApiModel

KIND = "NetworkFileSystem"
PLURAL = "networkfilesystems"
LABELS = {"app.kubernetes.io/managed-by": "mountwarden"}
#: The most a NetworkFileSystem's spec may take, in bytes of JSON: etcd refuses objects above 1.5 MiB.
SPEC_BUDGET = 1_000_000


class InventorySummary(ApiModel):
    classes: int = Field(description="StorageClasses on it.")
    volumes: int = Field(description="PersistentVolumes on it.")
    inline_volumes: int = Field(default=0, description="Pods' in-line NFS volumes on it.")
    claims: int = Field(description="Claims bound to its volumes.")
    pods: int = Field(description="Pods using its volumes.")
    nodes: int = Field(description="Nodes those pods run on.")
    governed: int = Field(description="Volumes a StorageProfile governs (its lineage, or adopted).")
    ungoverned: int = Field(description="Volumes (and in-line volumes) no StorageProfile governs: held to the "
                                        "baseline.")
    adoption_pending: int = Field(default=0, description="Volumes a profile's spec.adopt takes, not adopted yet.")
    pod_volumes: dict[str, int] = Field(default_factory=dict, description="Pod volumes by verdict: compliant "
                                        "(as declared, or meeting the baseline), drifted, unknown.")
    findings: int = Field(description="Findings that count (warnings and worse).")
    findings_by_severity: dict[str, int] = Field(default_factory=dict, description="Of those, by severity.")
    disagreements: int = Field(default=0, description="Places where class, PV and node say different things.")


class InventoryClass(ApiModel):
    name: str = Field(description="The StorageClass.")
    provisioner: str = Field(description="Its provisioner.")
    governed_by: str | None = Field(default=None, description="The StorageProfile whose version it is.")
    adopted_by: str | None = Field(default=None, description="The StorageProfile that adopted it.")
    adoption_pending_by: str | None = Field(default=None, description="A StorageProfile whose spec.adopt names it, "
                                                                      "not adopted yet.")
    default: bool = Field(default=False, description="The cluster's default class.")
    mount_options: list[str] = Field(default_factory=list, description="Its mountOptions: what new volumes get.")
    volumes: int = Field(default=0, description="Its PersistentVolumes on this file system.")


class InventoryOptions(ApiModel):
    storage_class: list[str] | None = Field(default=None, description="The class's mountOptions (none: no class).")
    persistent_volume: list[str] = Field(default_factory=list, description="The PV's mountOptions.")


class InventoryAdoption(ApiModel):
    profile: str = Field(description="The StorageProfile adopting it.")
    state: str = Field(description="Pending or Adopted.")


class InventoryPod(ApiModel):
    pod: str = Field(description="namespace/name of a pod using the volume.")
    uid: str = Field(description="Its UID.")
    node: str | None = Field(default=None, description="Its node.")
    contract: str = Field(description="The StorageProfile it is judged by, or baseline.")
    state: str = Field(description="compliant (as declared, or meeting the baseline), drifted or unknown.")
    reason: str = Field(description="Why: its worst finding's reason, or why it could not be judged.")
    effective_options: list[str] | None = Field(default=None, description="The options in effect on its node "
                                                                          "(its NodeMountReport).")
    findings: list[str] = Field(default_factory=list, description="The reasons of its findings.")


class InventoryVolume(ApiModel):
    name: str = Field(description="The PersistentVolume.")
    storage_class_name: str = Field(default="", description="Its class.")
    claim: str | None = Field(default=None, description="namespace/name of its claim.")
    source: str = Field(description="nfs (in-tree) or its CSI driver.")
    server: str | None = Field(default=None, description="The server its source names.")
    path: str | None = Field(default=None, description="The export path, or the CSI volume handle.")
    governed_by: str | None = Field(default=None, description="The StorageProfile that governs it; none: the "
                                                              "baseline.")
    adoption: InventoryAdoption | None = Field(default=None, description="A profile adopting it.")
    options: InventoryOptions = Field(description="Its options in its class and in itself.")
    nodes: list[str] = Field(default_factory=list, description="Nodes it is mounted on.")
    pods: list[InventoryPod] = Field(default_factory=list, description="The pods using it, each judged.")


class InventoryInlineVolume(InventoryPod):
    volume_name: str = Field(description="The pod's name for the volume.")
    server: str | None = Field(default=None, description="The server it mounts.")


class InventoryFinding(ApiModel):
    reason: str = Field(description="The finding's reason: a docs/runbook.md heading.")
    severity: str = Field(description="critical, error or warning.")
    policy: str | None = Field(default=None, description="The StorageProfile, or mountwarden-baseline.")
    pod: str | None = Field(default=None, description="namespace/name of the pod.")
    node: str | None = Field(default=None, description="Its node.")
    volume: str | None = Field(default=None, description="The volume.")
    option: str | None = Field(default=None, description="The option, for a finding on one.")
    message: str = Field(description="What was found, with its evidence and remedy.")


class NetworkFileSystemSpec(ApiModel):
    file_system: str = Field(description="The EFS file system (fs-...) or the NFS server.")
    kind: str = Field(description="efs or nfs.")
    servers: list[str] = Field(default_factory=list, description="The server addresses its volumes name or mount.")
    summary: InventorySummary = Field(description="What is on it, in numbers.")
    classes: list[InventoryClass] = Field(default_factory=list, description="Its StorageClasses.")
    volumes: list[InventoryVolume] = Field(default_factory=list, description="Its PersistentVolumes.")
    inline_volumes: list[InventoryInlineVolume] = Field(default_factory=list, description="Pods' in-line volumes.")
    disagreements: list[str] = Field(default_factory=list, description="Where class, PV and node disagree.")
    findings: list[InventoryFinding] = Field(default_factory=list, description="Every finding on its volumes.")
    omitted: str | None = Field(default=None, description="What was left out to keep the object under etcd's "
                                                          "limit (mountwarden inventory --json lists everything).")
    checked_at: datetime = Field(description="When the operator last took the inventory.")


def network_file_system(item: dict, checked_at: str, volumes: Callable[[], Iterable[dict]] | None = None) -> dict:
    """The NetworkFileSystem object of one file system of the inventory (mountwarden.core.inventory's dict).

    ``volumes``, when given, makes the file system's volume dicts afresh on each call (``item``'s own are then
    ignored): it is called twice, once to size each volume and once to make those that fit, so that a pass never
    holds every volume as a dict at once (mountwarden.core.inventory's ``FileSystemView.volume_dicts``).
    """
    spec = {key: value for key, value in item.items() if key not in ("name", "objectName")}
    spec = {"fileSystem": item["name"], **spec, "checkedAt": checked_at}
    if volumes is None:
        listed = spec["volumes"]
        volumes = lambda: listed  # noqa: E731 (the dicts at hand, walked twice)
    wire = NetworkFileSystemSpec.model_validate(_within_budget(spec, volumes)).to_wire()
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": item["objectName"], "labels": dict(LABELS)}, "spec": wire}


def _within_budget(spec: dict, volumes: Callable[[], Iterable[dict]]) -> dict:
    """Leave pods' options, then volumes and findings out, until the spec fits; say what was left out.

    The size is summed item by item, never taken with one json.dumps of the whole spec: at 20,000 pods that is
    6.6 MB of JSON, and the C encoder holds the GIL throughout (50 ms here, several times a pass), so every other
    thread waited, the webhook's event loop included (bench/results/scale_webhook_profile.txt, run F). Volumes are
    sized as ``volumes()`` makes them, each dropped once sized: only the ones kept are made again. Each list is
    sized only until it alone passes the budget: no longer prefix of it can fit, so the rest are counted, not
    encoded (at 20,000 pods every volume was encoded twice on every pass: 351 of 970 busy samples of the operator in
    40 s of py-spy under bench/scale.py's load, 11 since).
    """
    findings = list(spec["findings"])
    room = SPEC_BUDGET - _encoded_size({**spec, "volumes": [], "findings": []})
    findings_sized = _SizedList()
    for finding in findings:
        if findings_sized.extra > room:
            break
        findings_sized.add(_encoded_size(finding))
    findings_extra = findings_sized.extra if findings_sized.sizes_count == len(findings) else math.inf
    full, bare = _SizedList(), _SizedList()  # each volume with its pods' effective options, and without
    count = 0
    for volume in volumes():
        count += 1
        if full.sizes_count == count - 1 and full.extra + findings_extra <= room:
            full.add(_encoded_size(volume))
        if bare.extra <= room:
            bare.add(_encoded_size(_without_effective_options(volume)))
    if full.sizes_count == count and full.extra + findings_extra <= room:
        return {**spec, "volumes": list(volumes())}
    kept_volumes, kept_findings = count, len(findings)
    while (bare.extra_of(kept_volumes) + findings_sized.extra_of(kept_findings) > room
           and (kept_volumes or kept_findings)):
        kept_volumes, kept_findings = kept_volumes * 3 // 4, kept_findings * 3 // 4
    kept = [_without_effective_options(volume) for volume in itertools.islice(volumes(), kept_volumes)]
    return {**spec, "volumes": kept, "findings": findings[:kept_findings],
            "omitted": (f"{count - kept_volumes} volumes, {len(findings) - kept_findings} findings and "
                        "every pod's effective options left out to fit one object: `mountwarden inventory --json` "
                        "lists them all")}


class _SizedList:
    """The sizes of a JSON list's first items, summed as they are added."""

    def __init__(self) -> None:
        self.sums = [0]  # the first n items' sizes, for each n

    @property
    def sizes_count(self) -> int:
        return len(self.sums) - 1

    @property
    def extra(self) -> float:
        return self.extra_of(self.sizes_count)

    def add(self, size: int) -> None:
        self.sums.append(self.sums[-1] + size)

    def extra_of(self, count: int) -> float:
        """What the first ``count`` items add to an empty JSON list: themselves and a ", " between each two; more
        than any budget past the items sized (sizing stopped once they passed it)."""
        if count > self.sizes_count:
            return math.inf
        return self.sums[count] + 2 * (count - 1) if count else 0


def _without_effective_options(volume: dict) -> dict:
    return {**volume, "pods": [{**pod, "effectiveOptions": None} for pod in volume["pods"]]}


def _encoded_size(value) -> int:
    return len(json.dumps(value))
