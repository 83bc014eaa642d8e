"""Subcommand: plan (the rollout a StorageProfile file would make, as a dry run against the cluster)."""

from pathlib import Path
from typing import Annotated

import kubernetes
import typer
import yaml
from kubernetes.client import ApiException
from kubernetes.config import ConfigException
from pydantic import ValidationError
from rich.table import Table

from mountwarden.adapters.kube import StorageClasses, TransientApiError, api_client
from mountwarden.adapters.workloads import ClusterWorkloads
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL, StorageProfileSpec, adopter_of, desired_class
from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, print_json
from mountwarden.core.adoption import Adopter, CandidateVolume, Selection, select
from mountwarden.core.rollout import Plan, Policy, Target, Version, adopting, build_plan
from mountwarden.core.storageclass import PROFILE_LABEL, ClassEntry, ExistingClass, plan_classes


def _read_profile(path: Path) -> tuple[str, StorageProfileSpec]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        fail(f"cannot read the profile {path}: {error}")
    if not isinstance(document, dict) or "spec" not in document or not (document.get("metadata") or {}).get("name"):
        fail(f"{path} is not a StorageProfile: it needs metadata.name and spec.")
    try:
        spec = StorageProfileSpec.model_validate(document["spec"])
    except ValidationError as error:
        fail(f"{path}: " + "; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    return document["metadata"]["name"], spec


def _target(name: str, spec: StorageProfileSpec, classes: StorageClasses) -> Target:
    """The version the file would get: an existing class with the same content, or the next number."""
    policy = spec.resolve()
    if not policy.valid:
        fail("; ".join(str(problem) for problem in policy.errors))
    desired = desired_class(spec, policy)
    found = (ExistingClass.from_object(obj) for obj in classes.list(f"{PROFILE_LABEL}={name}"))
    existing = [cls for cls in found if cls is not None]
    outcome = plan_classes(name, desired, existing, make_default=spec.default)
    version = Version(outcome.current_name, outcome.current_version, tuple(desired.mount_options))
    lineage = tuple(Version(cls.name, cls.version, cls.mount_options) for cls in existing
                    if cls.name != version.storage_class) + (version,)
    rollout = spec.rollout
    return Target(name, version, lineage, Policy(str(rollout.strategy), str(rollout.approval),
                                                 rollout.max_concurrent_workloads, rollout.verify_timeout_seconds))


def _adoption(client, name: str, spec: StorageProfileSpec, classes: StorageClasses) -> tuple[Adopter, list, dict]:
    """The file's spec.adopt, the other profiles' (who adopts what first), and the classes, from the cluster."""
    profiles = kubernetes.client.CustomObjectsApi(client).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    created = {obj["metadata"]["name"]: obj["metadata"].get("creationTimestamp") for obj in profiles}
    # A profile not created yet will be the newest: of two that adopt one thing, the first keeps it.
    adopter = adopter_of(name, spec, created.get(name) or "9999")
    others = []
    for obj in profiles:
        try:
            other = adopter_of(obj["metadata"]["name"], StorageProfileSpec.model_validate(obj.get("spec") or {}),
                               obj["metadata"].get("creationTimestamp"))
        except ValidationError:
            continue
        if other.profile != name and other.adopts:
            others.append(other)
    entries = {obj["metadata"]["name"]: ClassEntry.from_object(obj) for obj in classes.list("")}
    return adopter, others, entries


def _show(plan: Plan, selection: Selection | None = None) -> None:
    document = plan.to_dict()
    console.print(f"[bold]{document['profile']}[/]: versions {document['fromVersions'] or '-'} -> "
                  f"{document['toVersion']} ({document['toStorageClass']}), strategy {document['strategy']}, "
                  f"approval {document['approval']}")
    volumes = Table("PersistentVolume", "class", "claim", "action", title="Volumes")
    for volume in document["volumes"]:
        volumes.add_row(volume["name"], volume["storageClassName"], volume["claim"] or "-", volume["action"])
    console.print(volumes)
    workloads = Table("workload", "replicas", "volumes", "action", "note", title="Workloads, in restart order")
    for workload in document["workloads"]:
        workloads.add_row(f"{workload['kind']}/{workload['namespace']}/{workload['name']}",
                          "-" if workload["replicas"] is None else str(workload["replicas"]),
                          ", ".join(workload["volumes"]), workload["action"], workload["note"])
    console.print(workloads)
    for warning in document["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}")
    if selection is not None:
        console.print(f"spec.adopt takes {len(selection.volumes)} volumes (action adopt) of classes "
                      f"{', '.join(selection.classes) or '-'}; approve with mountwarden.io/approve-rollout: "
                      f"\"{document['approvalKey']}\"")
        for refusal in selection.refusals:
            console.print(f"[red]refused:[/] {refusal.field}: {refusal.message}")


@app.command("plan")
def plan_command(
    profile: Annotated[Path, typer.Argument(help="A StorageProfile YAML file: a new profile or a changed "
                                                 "version of an existing one.")],
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG",
                                                   help="Outside a cluster: the kubeconfig to use.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Show what applying PROFILE would roll out: the PVs it patches and the workloads it restarts, in order.

    A dry run against the current cluster: it reads the profile's StorageClasses, PVs, pods and workloads
    and changes nothing. A change that makes volumes staler (a longer attribute cache, negative lookups
    cached) names each workload that loses freshness and by how much, before anything moves: find out
    whether it relies on fresh attributes first. With spec.adopt it also lists the volumes the profile
    would take over (action adopt), what it would refuse and why, and the approval key of that plan.

    JSON: profile, fromVersions, toVersion, toStorageClass, toMountOptions, strategy, approval, volumes
    [{name, storageClassName, claim, fromVersion, mountOptions, action patch|keep|adopt}], workloads [{kind,
    namespace, name, replicas, pods, volumes, action restart|wait|none|migrate, note}], warnings and
    freshnessLoss [{kind, namespace, name, pods, volumes, loses}].

    Example: mountwarden plan examples/upload-staging.yaml --json
    """
    name, spec = _read_profile(profile)
    selected: list[Selection] = []
    try:
        client = api_client(kubeconfig)
        classes = StorageClasses(client)
        target = _target(name, spec, classes)
        also = None
        if spec.adopt is not None:
            adopter, others, entries = _adoption(client, name, spec, classes)

            def also(pvs):
                selected.append(select(adopter, others, entries, [CandidateVolume.from_object(pv) for pv in pvs]))
                return selected[0].volumes

        world = ClusterWorkloads(client).read([version.storage_class for version in target.lineage],
                                              with_reports=False, also=also)
    except (ConfigException, ApiException, TransientApiError) as error:
        fail(f"cannot read the cluster: {error}")
    selection = selected[0] if selected else None
    plan = build_plan(adopting(target, selection.volumes, world) if selection else target, world)
    if json_output:
        document = plan.to_dict()
        if selection is not None:
            document["adoption"] = {"storageClassNames": list(selection.classes), "volumes": list(selection.volumes),
                                    "refused": [refusal.to_wire() for refusal in selection.refusals]}
        print_json(document)
    else:
        _show(plan, selection)
