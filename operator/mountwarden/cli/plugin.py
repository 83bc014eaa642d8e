"""`kubectl mountwarden`: the kubectl plugin (the executable `kubectl-mountwarden`, installed with the package).

kubectl runs any `kubectl-<name>` on PATH as `kubectl <name>`, handing it the rest of the command line; the plugin
follows kubectl's own flags (--kubeconfig, --context, -n/--namespace, -o json|yaml|wide). Its answers are built by
the same function the operator and `mountwarden inventory` use (mountwarden.core.inventory.take_inventory, on the
objects mountwarden.adapters.inventory.read_facts lists: NodeMountReports through the api/ translator), plus the
operator's Events on the pod: what it says is what the operator would say, never a second opinion.
"""

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

import kubernetes
import typer
import yaml
from kubernetes.client import ApiClient, ApiException
from kubernetes.config import ConfigException
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from mountwarden.adapters.inventory import read_facts
from mountwarden.adapters.kube import TransientApiError, api_client
from mountwarden.cli._output import console, fail, print_json
from mountwarden.cli.inventory import STALE_AFTER, STATE_STYLE, inventory_command
from mountwarden.cli.options import options_app
from mountwarden.cli.plan import plan_command
from mountwarden.core.baseline import BASELINE_POLICY
from mountwarden.core.compliance import Contract
from mountwarden.core.findings import Severity
from mountwarden.core.inventory import (
    BASELINE,
    ClusterFacts,
    FileSystemView,
    Inventory,
    PodVolume,
    VolumeView,
    take_inventory,
)
from mountwarden.core.node.report import NodeReport, ReportedMount
from mountwarden.core.options.normalize import canonical_sort, format_canonical, normalize

plugin = typer.Typer(
    name="kubectl mountwarden",
    help=(
        "mountwarden as a kubectl plugin: what each pod's NFS volumes were promised, what the nodes really mount, "
        "and who shares what.\n\n"
        "Flags as kubectl's: --kubeconfig, --context, -n/--namespace (default: the context's namespace), "
        "-o json|yaml|wide. `why POD` explains a pod's volumes; `who CLAIM|PV` lists who mounts a volume and with "
        "what. The offline commands of `mountwarden` are here too (options, plan, inventory)."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
plugin.add_typer(options_app, name="options")
plugin.command("plan")(plan_command)
plugin.command("inventory")(inventory_command)


class Output(StrEnum):
    JSON = "json"
    YAML = "yaml"
    WIDE = "wide"


KubeconfigFlag = Annotated[str | None, typer.Option(
    "--kubeconfig", envvar="KUBECONFIG", help="Path to the kubeconfig file (as kubectl's; default $KUBECONFIG, "
                                              "then ~/.kube/config).")]
ContextFlag = Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use (as kubectl's).")]
NamespaceFlag = Annotated[str | None, typer.Option(
    "--namespace", "-n", help="The namespace (as kubectl's; default: the context's namespace, else default).")]
OutputFlag = Annotated[Output | None, typer.Option(
    "--output", "-o", help="json or yaml: one complete document on stdout; wide: the table with more columns. "
                           "Default: a table a person reads in one screen.")]


@dataclass
class Session:
    """The cluster as kubectl would reach it: the client, and the namespace the flags (or the context) name."""

    client: ApiClient
    namespace: str


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Session:
    try:
        if namespace is None:
            contexts, current = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = next((c for c in contexts if c["name"] == context), None) if context else current
            namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        return Session(api_client(kubeconfig, context), namespace)
    except (ConfigException, OSError) as error:
        fail(f"cannot read the kubeconfig ({kubeconfig or '~/.kube/config'}"
             f"{', context ' + context if context else ''}): {error}. Pass --kubeconfig and --context as to "
             "kubectl.")


def _look_around(session: Session) -> tuple[ClusterFacts, Inventory]:
    """Every network volume, pod and report, judged as the operator judges them."""
    try:
        facts = read_facts(session.client)
    except (ApiException, TransientApiError) as error:
        fail(f"cannot read the cluster: {error}")
    return facts, take_inventory(facts, now=datetime.now(UTC), stale_after=STALE_AFTER)


def _emit(document: dict, output: Output | None) -> bool:
    """Print ``document`` when -o asks for a document; whether it did."""
    if output is Output.JSON:
        print_json(document)
    elif output is Output.YAML:
        # The same document as -o json: through JSON, so that YAML sees only plain types.
        plain = json.loads(json.dumps(document, default=str))
        sys.stdout.write(yaml.safe_dump(plain, sort_keys=False, default_flow_style=False))
    return output in (Output.JSON, Output.YAML)


# --- what each part says ---------------------------------------------------------------------------------------

def _canonical(options: Iterable[str] | None) -> list[str] | None:
    return None if options is None else normalize(list(options), observed=True).mount_options


def contract_dict(name: str, contract: Contract | None) -> dict:
    """The declared contract: the StorageProfile's resolved options, or the baseline's hazards when none governs."""
    if name == BASELINE or contract is None:
        return {"kind": "baseline", "name": BASELINE_POLICY, "options": None, "required": [], "forbidden": [],
                "sqlite": None,
                "says": "no StorageProfile governs it: held to the kernel's defaults and mountwarden's baseline (no "
                        "round-trip flags, no soft writable mount, no local locks across nodes, noresvport on EFS)"}
    return {"kind": "StorageProfile", "name": name,
            "options": [format_canonical(k, v) for k, v in canonical_sort(contract.options).items()],
            "required": list(contract.required), "forbidden": list(contract.forbidden),
            "sqlite": str(contract.sqlite), "says": f"kubectl get storageprofile {name}"}


def finding_documents(pod_volume: PodVolume, *, counting: bool = True) -> list[dict]:
    """The pod volume's findings (``counting``: those against compliance, else the information), each with the
    policy it is published under (the StorageProfile, or the baseline's) and its remedy."""
    policy = BASELINE_POLICY if pod_volume.contract == BASELINE else pod_volume.contract
    return [{**finding.to_dict(), "policy": finding.profile or policy} for finding in pod_volume.findings
            if finding.counts is counting]


def _sharers(report: NodeReport, mount: ReportedMount, facts: ClusterFacts) -> list[dict]:
    """Every other mount on the node with the same superblock, and whose pod and volume it is."""
    found = []
    for other in report.mounts:
        if other is mount or other.superblock != mount.superblock:
            continue
        pod = facts.pod_of_uid(other.pod_uid) if other.pod_uid else None
        found.append({"mountPoint": other.mount_point, "volume": other.volume_name,
                      "pod": f"{pod.namespace}/{pod.name}" if pod else None, "podUID": other.pod_uid})
    listed = {entry["mountPoint"] for entry in found}
    # The agent's own list (sharedWith) names mount points outside pods too (a staging mount, a host mount).
    found += [{"mountPoint": point, "volume": None, "pod": None, "podUID": None}
              for point in mount.shared_with if point not in listed]
    return found


def mount_dict(facts: ClusterFacts, node: str | None, pod_uid: str, names: Iterable[str]) -> dict | None:
    """The pod's mount as its node's report shows it: where, on which superblock, who else is on it."""
    report = facts.reports.get(node or "")
    mount = report.mount_of(pod_uid, tuple(names)) if report else None
    if report is None or mount is None:
        return None
    return {"mountPoint": mount.mount_point, "superblock": mount.superblock, "server": mount.server,
            "serverAddress": mount.server_address, "connections": mount.connections,
            "serverResponding": mount.server_responding, "sharedWith": _sharers(report, mount, facts)}


def node_dict(facts: ClusterFacts, node: str | None, now: datetime) -> dict:
    """The node's report: when it was written, or why there is none and what to do."""
    if node is None:
        return {"name": None, "report": None,
                "problem": "the pod is not scheduled on a node yet: nothing is mounted, nothing to audit"}
    report = facts.reports.get(node)
    if report is None:
        return {"name": node, "report": None,
                "problem": f"no NodeMountReport for node {node} yet: the mountwarden agent writes one when it starts "
                           "and every 5 minutes. Is its DaemonSet's pod running there? kubectl get pods -A -l "
                           f"app.kubernetes.io/component=agent --field-selector spec.nodeName={node} (a node where "
                           "no agent can run, such as a virtual node, never has one)"}
    age = int((now - report.scan_time).total_seconds())
    stale = now - report.scan_time > STALE_AFTER
    return {"name": node, "report": {"name": node, "scanTime": report.scan_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                     "ageSeconds": age, "stale": stale, "kernelRelease": report.kernel_release},
            "problem": (f"the NodeMountReport of {node} is {age} s old (older than {int(STALE_AFTER.total_seconds())} "
                        "s proves nothing): is the mountwarden agent still running there?") if stale else None}


def _volume_dict(pod_volume: PodVolume, view: VolumeView | None, fs: FileSystemView, facts: ClusterFacts,
                 names: tuple[str, ...]) -> dict:
    contract = facts.contracts.get(pod_volume.contract)
    volume = view.volume if view else None
    return {
        "persistentVolume": volume.name if volume else None,
        "claim": "/".join(volume.claim) if volume and volume.claim else None,
        "storageClass": (volume.storage_class or None) if volume else None,
        "fileSystem": fs.name, "networkFileSystem": fs.object_name, "efs": fs.efs,
        "server": volume.server if volume else None, "path": volume.path if volume else None,
        "contract": contract_dict(pod_volume.contract, contract),
        "options": {
            "contract": contract_dict(pod_volume.contract, contract)["options"],
            "storageClass": _canonical(view.class_options) if view else None,
            "persistentVolume": _canonical(volume.mount_options) if volume else None,
            "node": list(pod_volume.effective_options) if pod_volume.effective_options is not None else None,
        },
        "state": str(pod_volume.state), "reason": pod_volume.reason, "message": pod_volume.message,
        "mount": mount_dict(facts, pod_volume.node, pod_volume.uid, names),
        "findings": finding_documents(pod_volume),
        "information": finding_documents(pod_volume, counting=False),
    }


def _events(session: Session, namespace: str, uid: str) -> list[dict]:
    """The operator's Events on the pod (kopf posts them), oldest first."""
    core = kubernetes.client.CoreV1Api(session.client)
    try:
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}").items
    except ApiException as error:
        fail(f"cannot read the Events of the pod: {error}")
    ours = [e for e in events if (e.source and e.source.component == "kopf") or e.reporting_component == "kopf"]
    stamp = datetime.min.replace(tzinfo=UTC)
    ours.sort(key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp or stamp)
    return [{"type": e.type, "reason": e.reason, "message": e.message, "count": e.count or 1,
             "lastSeen": str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp)} for e in ours]


# --- why -------------------------------------------------------------------------------------------------------

def why_document(session: Session, pod_name: str) -> dict:
    core = kubernetes.client.CoreV1Api(session.client)
    try:
        pod = core.read_namespaced_pod(pod_name, session.namespace)
    except ApiException as error:
        if error.status == 404:
            fail(f"pod {pod_name} not found in namespace {session.namespace}: is it another namespace (-n), "
                 f"another cluster (--context)? kubectl get pods -n {session.namespace}", code=1)
        fail(f"cannot read pod {session.namespace}/{pod_name}: {error.status} {error.reason}")
    uid, node = pod.metadata.uid, pod.spec.node_name
    facts, inventory = _look_around(session)
    now = inventory.checked_at
    claims = {}
    for volume in pod.spec.volumes or []:
        if volume.persistent_volume_claim:
            claims[volume.persistent_volume_claim.claim_name] = volume.name
    volumes, other = [], []
    explained: set[str] = set()
    for fs in inventory.file_systems:
        for view in fs.volumes:
            claim = view.volume.claim
            mine = [p for p in view.pods if p.uid == uid]
            if not mine or claim is None or claim[1] not in claims:
                continue
            explained.add(claims[claim[1]])
            volumes.append({"name": claims[claim[1]],
                            **_volume_dict(mine[0], view, fs, facts, (view.volume.name, claims[claim[1]]))})
        for inline in fs.inline:
            if inline.pod.uid == uid:
                explained.add(inline.volume_name)
                volumes.append({"name": inline.volume_name, **_volume_dict(inline.pod, None, fs, facts,
                                                                            (inline.volume_name,))})
    for volume in pod.spec.volumes or []:
        if volume.name in explained:
            continue
        network = volume.nfs or volume.csi or volume.persistent_volume_claim
        other.append({"name": volume.name, "why": (
            "not on network storage (or its claim is not bound to a PersistentVolume on network storage)"
            if volume.persistent_volume_claim else
            "an in-line NFS or CSI volume the node's report does not show (not mounted yet, or no report)"
            if network else "not a network volume")})
    volumes.sort(key=lambda v: v["name"])
    return {"apiVersion": "mountwarden.io/v1alpha1", "kind": "PodExplanation",
            "checkedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "pod": {"namespace": session.namespace, "name": pod_name, "uid": uid, "node": node,
                    "phase": pod.status.phase if pod.status else None},
            "node": node_dict(facts, node, now), "volumes": volumes, "otherVolumes": other,
            "events": _events(session, session.namespace, uid), "notes": list(inventory.notes)}


#: The severities, worst first, each with its colour.
_SEVERITY_STYLE = {str(Severity.CRITICAL): "bold red", str(Severity.ERROR): "red", str(Severity.WARNING): "yellow"}


def _severity_style(severity: str) -> str:
    return _SEVERITY_STYLE.get(severity, "dim")


def _names(*lists: Iterable[str] | None) -> list[str]:
    """The option names the lists say, in the table's order (vers first)."""
    named: dict[str, None] = {"vers": None}
    for options in lists:
        named.update(dict.fromkeys(normalize(list(options or []), observed=True).options))
    return list(canonical_sort(dict.fromkeys(named, True)))


def _in_effect(node: list[str], names: list[str], wide: bool) -> str:
    """What the node has in effect: in full (wide), or the options the contract, the class or the PV name."""
    if wide:
        return ",".join(node)
    effective = normalize(node, observed=True).options
    shown = [format_canonical(name, effective[name]) for name in names if name in effective]
    return ",".join(shown) + f" [dim](+{len(effective) - len(shown)} more: -o wide)[/]"


def _options_table(volume: dict, wide: bool) -> Table:
    options, contract = volume["options"], volume["contract"]
    table = Table("where", "options", box=None, show_header=False, padding=(0, 1))
    table.columns[1].overflow = "fold"
    declared = (f"StorageProfile {contract['name']}: " + (",".join(options["contract"] or []) or "(none)")
                if contract["kind"] == "StorageProfile" else f"[dim]{escape(contract['says'])}[/]")
    if contract["required"] or contract["forbidden"]:
        declared += (f"; required {','.join(contract['required']) or '-'}; forbidden "
                     f"{','.join(contract['forbidden']) or '-'}")
    table.add_row("declared", declared)
    table.add_row("StorageClass", f"{volume['storageClass'] or '-'}: " + (
        ",".join(options["storageClass"]) if options["storageClass"] is not None else "(no such class)"))
    table.add_row("PV", f"{volume['persistentVolume'] or '(in-line)'}: " + (
        ",".join(options["persistentVolume"] or []) or "(none)"))
    node = options["node"]
    names = _names(options["contract"], options["storageClass"], options["persistentVolume"])
    table.add_row("on the node", _in_effect(node, names, wide) if node is not None
                  else "[yellow]unknown[/] (no mount of it in a report)")
    mount = volume["mount"]
    if mount is not None:
        sharers = mount["sharedWith"]
        shared = ("shared with " + "; ".join(
            f"{s['pod'] or 'no pod'} {s['volume'] or ''} ({s['mountPoint']})" if wide else
            f"{s['pod'] or s['mountPoint']}" for s in sharers)) if sharers else "its own"
        table.add_row("superblock", f"{mount['superblock']} on {mount['server'] or '-'}: {shared}")
        if wide:
            table.add_row("mount point", mount["mountPoint"])
    return table


def _first_sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".")


def _add_findings(branch: Tree, findings: list[dict], wide: bool) -> None:
    """Each finding under its reason, with its severity; a remedy said once for the findings that share it (in the
    runbook's words)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for finding in findings:
        groups.setdefault((finding["reason"], finding["remedy"]), []).append(finding)
    for (reason, remedy), members in groups.items():
        worst = min((f["severity"] for f in members), key=lambda s: list(_SEVERITY_STYLE).index(s)
                    if s in _SEVERITY_STYLE else len(_SEVERITY_STYLE))
        group = branch.add(f"[{_severity_style(worst)}]{reason}[/]" + (f" x{len(members)}" if len(members) > 1 else ""))
        for finding in members:
            message = finding["message"] if wide else _first_sentence(finding["message"])
            group.add(f"[{_severity_style(finding['severity'])}]{finding['severity']}[/]: {escape(message)}")
        first, _, rest = (remedy or "-").partition("\n")  # SQLite's goes on with a pod template: -o wide shows it
        group.add(f"[green]remedy:[/] {escape(remedy if wide else first)}"
                  + (" [dim](-o wide: the whole remedy)[/]" if rest and not wide else ""))


def show_why(document: dict, wide: bool) -> None:
    pod, node = document["pod"], document["node"]
    report = node["report"]
    seen = (f"NodeMountReport {report['name']}, {report['ageSeconds']} s old" if report else "no NodeMountReport")
    tree = Tree(f"[bold]pod {pod['namespace']}/{pod['name']}[/] on node {node['name'] or '(none)'} ({seen})")
    if node["problem"]:
        tree.add(f"[yellow]{escape(node['problem'])}[/]")
    if not document["volumes"]:
        tree.add("no volume on network storage: nothing for mountwarden to explain")
    for volume in document["volumes"]:
        style = STATE_STYLE.get(volume["state"], "")
        path = " -> ".join(x for x in (volume["claim"] and f"claim {volume['claim'].split('/')[1]}",
                                       volume["persistentVolume"] and f"PV {volume['persistentVolume']}") if x)
        branch = tree.add(f"[bold]volume {volume['name']}[/] ({path or 'in-line'}, {volume['fileSystem']}): "
                          f"[{style}]{volume['state']}[/] ({volume['reason']})")
        if not volume["findings"] or wide:  # a drifted volume's message is its worst finding's, listed below
            branch.add(escape(volume["message"]))
        branch.add(_options_table(volume, wide))
        _add_findings(branch, volume["findings"], wide)
        if wide:
            for finding in volume["information"]:
                branch.add(f"[dim]{finding['reason']} (info): {escape(finding['message'])}[/]")
    if document["otherVolumes"] and wide:
        for volume in document["otherVolumes"]:
            tree.add(f"[dim]volume {volume['name']}: {volume['why']}[/]")
    elif document["otherVolumes"]:
        tree.add(f"[dim]{len(document['otherVolumes'])} other volume(s) not on network storage (-o wide lists them)[/]")
    events = document["events"]
    if events:
        shown = events if wide else events[-3:]
        branch = tree.add(f"the operator's Events on the pod ({len(events)}"
                          f"{'' if wide or len(events) <= 3 else ', the last 3'})")
        for event in shown:
            text = event["message"] if wide else _first_sentence(event["message"])
            branch.add(f"{event['reason']} x{event['count']}: {escape(text)}")
    for note in document["notes"]:
        tree.add(f"[yellow]note:[/] {escape(note)}")
    console.print(tree, soft_wrap=False)


@plugin.command("why")
def why_command(
    pod: Annotated[str, typer.Argument(help="The pod's name (in -n's namespace, as kubectl's).", show_default=False)],
    namespace: NamespaceFlag = None,
    context: ContextFlag = None,
    kubeconfig: KubeconfigFlag = None,
    output: OutputFlag = None,
) -> None:
    """Explain each of a pod's volumes on network storage: what was declared, what is in effect, what is wrong.

    For each NFS or EFS volume of the pod: the contract it is held to (the StorageProfile governing its class,
    or the baseline when none does), the options in the StorageClass, in the PersistentVolume and in effect on
    the node (the node's NodeMountReport, written by the mountwarden agent), the superblock and every other
    mount sharing it (the kernel keeps the first mount's options for all of them), the findings with their
    remedies (docs/runbook.md), and the operator's Events on the pod. Reads the cluster, changes nothing.

    Exit 1 when the pod does not exist; 0 otherwise, whatever the findings (`-o json` has them).
    """
    session = connect(kubeconfig, context, namespace)
    document = why_document(session, pod)
    if not _emit(document, output):
        show_why(document, output is Output.WIDE)


# --- who -------------------------------------------------------------------------------------------------------

def _resolve(session: Session, name: str) -> str:
    """The PersistentVolume a name means: the claim of that name in the namespace (bound), else the PV itself."""
    core = kubernetes.client.CoreV1Api(session.client)
    try:
        claim = core.read_namespaced_persistent_volume_claim(name, session.namespace)
    except ApiException as error:
        if error.status != 404:
            fail(f"cannot read PersistentVolumeClaim {session.namespace}/{name}: {error.status} {error.reason}")
    else:
        if not claim.spec.volume_name:
            fail(f"PersistentVolumeClaim {session.namespace}/{name} is not bound to a PersistentVolume yet "
                 f"(phase {claim.status.phase if claim.status else '?'}): no pod can mount it. kubectl describe pvc "
                 f"-n {session.namespace} {name}", code=1)
        return claim.spec.volume_name
    try:
        core.read_persistent_volume(name)
    except ApiException as error:
        if error.status == 404:
            fail(f"neither a PersistentVolumeClaim {name} in namespace {session.namespace} nor a PersistentVolume "
                 f"{name}: kubectl get pvc -n {session.namespace}; kubectl get pv", code=1)
        fail(f"cannot read PersistentVolume {name}: {error.status} {error.reason}")
    return name


def who_document(session: Session, name: str) -> dict:
    pv = _resolve(session, name)
    facts, inventory = _look_around(session)
    found = next(((fs, view) for fs in inventory.file_systems for view in fs.volumes if view.volume.name == pv), None)
    if found is None:
        fail(f"PersistentVolume {pv} is not on network storage (no NFS or known NFS CSI driver, and no report shows "
             "it mounted as NFS): mountwarden does not follow it. `mountwarden inventory` lists what it follows.",
             code=1)
    fs, view = found
    volume = view.volume
    contract_name = view.governed_by or BASELINE
    pods = [{"pod": p.pod, "uid": p.uid, "node": p.node, "state": str(p.state), "reason": p.reason,
             "message": p.message, "contract": p.contract, "effectiveOptions": list(p.effective_options)
             if p.effective_options is not None else None,
             "mount": mount_dict(facts, p.node, p.uid, (volume.name,)),
             "findings": finding_documents(p)} for p in view.pods]
    return {"apiVersion": "mountwarden.io/v1alpha1", "kind": "VolumeConsumers",
            "checkedAt": inventory.checked_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "persistentVolume": volume.name, "claim": "/".join(volume.claim) if volume.claim else None,
            "storageClass": volume.storage_class or None, "fileSystem": fs.name, "networkFileSystem": fs.object_name,
            "server": volume.server, "path": volume.path,
            "contract": contract_dict(contract_name, facts.contracts.get(contract_name)),
            "options": {"storageClass": _canonical(view.class_options),
                        "persistentVolume": _canonical(volume.mount_options)},
            "nodes": sorted({p["node"] for p in pods if p["node"]}), "pods": pods,
            "notes": list(inventory.notes)}


def show_who(document: dict, wide: bool) -> None:
    contract = document["contract"]
    console.print(f"[bold]PV {document['persistentVolume']}[/] (claim {document['claim'] or '-'}, class "
                  f"{document['storageClass'] or '-'}, {document['fileSystem']}): contract "
                  f"{contract['kind']} {contract['name']}")
    options = document["options"]
    console.print(f"  asks: class {','.join(options['storageClass'] or []) or '-'}; PV "
                  f"{','.join(options['persistentVolume']) or '(none)'}", soft_wrap=False)
    if not document["pods"]:
        console.print("no pod uses it")
    table = Table("POD", "NODE", "STATE", "EFFECTIVE OPTIONS", *(("SUPERBLOCK", "SHARED WITH", "FINDINGS")
                                                               if wide else ()), box=None)
    table.columns[3].overflow = "fold"
    names = _names(contract["options"], options["storageClass"], options["persistentVolume"])
    for pod in document["pods"]:
        style = STATE_STYLE.get(pod["state"], "")
        effective = _in_effect(pod["effectiveOptions"], names, wide) if pod["effectiveOptions"] is not None else "-"
        row = [pod["pod"], pod["node"] or "-", f"[{style}]{pod['state']}[/] ({pod['reason']})", effective]
        if wide:
            mount = pod["mount"] or {}
            row += [mount.get("superblock") or "-",
                    ", ".join(s["pod"] or s["mountPoint"] for s in mount.get("sharedWith") or []) or "-",
                    ", ".join(f["reason"] for f in pod["findings"]) or "-"]
        table.add_row(*row)
    console.print(table)
    for pod in document["pods"]:
        if pod["state"] == "unknown":
            console.print(f"[yellow]{pod['pod']}:[/] {escape(pod['message'])}")
    for note in document["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}")


@plugin.command("who")
def who_command(
    name: Annotated[str, typer.Argument(help="A PersistentVolumeClaim (in -n's namespace) or a PersistentVolume.",
                                        show_default=False, metavar="CLAIM|PV")],
    namespace: NamespaceFlag = None,
    context: ContextFlag = None,
    kubeconfig: KubeconfigFlag = None,
    output: OutputFlag = None,
) -> None:
    """List the pods using a claim or PersistentVolume, their nodes, and the options in effect for each.

    A claim of that name in the namespace is looked up first, then a PersistentVolume. For each pod: its node,
    its verdict (against the volume's StorageProfile, or the baseline) and the options its node's kernel has in
    effect (the node's NodeMountReport); -o wide adds the superblock, who shares it, and the findings.
    `why POD` explains one of them in full. Reads the cluster, changes nothing.
    """
    session = connect(kubeconfig, context, namespace)
    document = who_document(session, name)
    if not _emit(document, output):
        show_who(document, output is Output.WIDE)


def main() -> None:
    # As kubectl shows it to the user, whichever way it was started (kubectl, krew's launcher, python -m).
    plugin(prog_name="kubectl mountwarden")


if __name__ == "__main__":
    main()
