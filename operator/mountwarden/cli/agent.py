"""Subcommands: agent (the node agent) and audit (the same scan and the profile check on one machine)."""

import logging
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.markup import escape

from mountwarden.agent.metrics import DEFAULT_MAX_VOLUME_SERIES, SERIES_PER_VOLUME
from mountwarden.cli._app import app
from mountwarden.cli._output import console, err_console, fail, print_json
from mountwarden.core.findings import CheckResult
from mountwarden.core.node.check import check_volume
from mountwarden.core.node.kubelet import DEFAULT_KUBELET_ROOT
from mountwarden.core.node.scan import DEFAULT_NETWORK_FSTYPES, NodeVolume
from mountwarden.core.options.presets import EFS_PROVISIONER, CachePolicy
from mountwarden.core.policy import ResolvedPolicy, resolve_policy

ProcRootOption = Annotated[
    Path,
    typer.Option("--proc-root", metavar="DIR", help="The host's /proc: /proc on the node itself, /host/proc in "
                 "a pod that mounts it there, or a directory of samples laid out the same way (1/mountinfo, "
                 "1/mountstats, locks)."),
]
KubeletRootOption = Annotated[
    str,
    typer.Option("--kubelet-root", metavar="DIR", help="The kubelet's --root-dir. When it is a symlink on the "
                 "host (/var/lib/kubelet -> /data/kubelet), mounts under its target are found too."),
]
NetworkFstypesOption = Annotated[
    str,
    typer.Option("--network-fstypes", metavar="LIST", help="Comma-separated filesystem types that are network "
                 "storage (EFS and FSx for OpenZFS/NetApp ONTAP over NFS are nfs4)."),
]
DEFAULT_FSTYPES_TEXT = ",".join(DEFAULT_NETWORK_FSTYPES)


class MountTable(StrEnum):
    """Whose mount namespace the agent scans."""

    HOST = "host"  # <proc-root>/1: the host's, whose mountstats only root may read
    OWN = "own"  # <proc-root>/self: the agent's, with the kubelet's pods directory propagated in


class ProbeKind(StrEnum):
    STATVFS = "statvfs"
    NULL = "null"


def _fstypes(text: str) -> tuple[str, ...]:
    fstypes = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not fstypes:
        fail("--network-fstypes names no filesystem type")
    return fstypes


@app.command("agent")
def agent_command(
    node_name: Annotated[str, typer.Option(
        "--node-name", envvar="NODE_NAME", metavar="NAME",
        help="The node this agent runs on; its NodeMountReport has this name. In a DaemonSet, set NODE_NAME "
             "from the downward API (fieldRef: spec.nodeName).")],
    proc_root: ProcRootOption = Path("/proc"),
    kubelet_root: KubeletRootOption = DEFAULT_KUBELET_ROOT,
    network_fstypes: NetworkFstypesOption = DEFAULT_FSTYPES_TEXT,
    interval: Annotated[float, typer.Option(
        "--interval", min=1, metavar="SECONDS", help="Seconds between scans.")] = 30.0,
    heartbeat: Annotated[float, typer.Option(
        "--heartbeat", min=1, metavar="SECONDS",
        help="An unchanged report is rewritten (counters and scan time) at most this often.")] = 300.0,
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, max=65535, metavar="PORT",
        help="Serve Prometheus metrics on this port at /metrics; 0 serves none.")] = 9801,
    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", envvar="KUBECONFIG", metavar="FILE",
        help="Outside a cluster: the kubeconfig to use (in a pod, the service account is).")] = None,
    probe_timeout: Annotated[float, typer.Option(
        "--probe-timeout", min=0, metavar="SECONDS",
        help="How long each scan waits for every NFS server to answer the --probe (a statvfs() of its mounts, or "
             "the RPC NULL call); a server that does not is reported (serverResponding: false). 0 probes nothing.")
    ] = 5.0,
    probe: Annotated[ProbeKind, typer.Option(
        "--probe",
        help="How servers are asked: 'statvfs', one statvfs() of every pod volume through <proc-root>/1/root "
             "(uid 0 and CAP_SYS_PTRACE; also finds StaleFileHandle), or 'null', the RPC NULL call to each "
             "server at its mounts' addr= and port= (any uid; the node's network, for EFS's TLS tunnels on "
             "127.0.0.1; no StaleFileHandle).")] = ProbeKind.STATVFS,
    mount_table: Annotated[MountTable, typer.Option(
        "--mount-table",
        help="Whose mount table and NFS statistics to read: 'host' (<proc-root>/1, whose mountstats only uid 0 "
             "may read) or 'own' (<proc-root>/self: the agent's own mount namespace, which holds the pod volumes "
             "when the kubelet's pods directory is mounted into it at the same path with HostToContainer "
             "propagation; readable by any uid).")] = MountTable.HOST,
    process_samples: Annotated[int, typer.Option(
        "--process-samples", min=0, max=100, metavar="N",
        help="Rounds of samples, 0.2 s apart, of the state of every process of a pod with an NFS volume, per scan "
             "(/proc/<pid>/stat): the share in uninterruptible sleep (D) is reported per volume. 0 samples none.")
    ] = 5,
    kernel_log: Annotated[str, typer.Option(
        "--kernel-log", metavar="PATH",
        help="Follow this kernel log (/dev/kmsg) for the NFS client's 'server ... not responding' and 'server ... "
             "OK' lines, evidence of ServerNotResponding beside the probe and mountstats. Needs CAP_SYSLOG and the "
             "device (a container reaches it only privileged); without them the agent says so once and goes on. "
             "'' reads none.")] = "/dev/kmsg",
    helper_stuck_after: Annotated[float, typer.Option(
        "--helper-stuck-after", min=1, metavar="SECONDS",
        help="A mount.nfs or umount.nfs alive this long is MountHelperStuck (a foreground mount retries for 2 "
             "minutes, nfs(5)).")] = 180.0,
    activity_window: Annotated[float, typer.Option(
        "--activity-window", min=1, metavar="SECONDS",
        help="Throughput, transport health and process states are reported over this many seconds of scans.")
    ] = 300.0,
    max_volume_series: Annotated[int, typer.Option(
        "--max-volume-series", min=0, metavar="N",
        help="Serve the per-volume series of at most N pod volumes (the busiest over --activity-window): at most "
             f"{SERIES_PER_VOLUME} series each (4 for each operation the report keeps, 6 of activity), so at most "
             f"{SERIES_PER_VOLUME} x N on /metrics. "
             "Past it, mountwarden_agent_volumes_over_cap counts the volumes left out; the report keeps them all.")
    ] = DEFAULT_MAX_VOLUME_SERIES,
    name_pods: Annotated[bool, typer.Option(
        "--name-pods/--no-name-pods",
        help="Name each volume's pod, namespace, controller and claim in the report, from a watch of this node's "
             "pods (list and watch on pods, get on persistentvolumeclaims). Without it reports give pod UIDs "
             "only, and the operator names the pods.")] = True,
    sqlite_scan: Annotated[bool, typer.Option(
        "--sqlite-scan/--no-sqlite-scan",
        help="Find SQLite databases in use on network volumes, and pods' processes that talk NFS over sockets of "
             "their own (no kernel mount: UserspaceNFSClient): reads every lock holder's open files and memory maps "
             "(/proc/<pid>/fd, fdinfo, maps) and each network namespace's TCP table (/proc/<pid>/ns/net, net/tcp), "
             "which needs CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (root) for processes of other users.")] = True,
    once: Annotated[bool, typer.Option(
        "--once", help="Scan and write once, then exit (1 when the scan or the write failed); no metrics server. "
                       "Rates are then since each mount was made.")
    ] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the report as JSON on stdout instead of writing it; needs no cluster.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every scan's details.")] = False,
) -> None:
    """Run the node agent: report what is really mounted for every pod volume on network storage.

    Every --interval seconds the agent reads the host's mount table
    (<proc-root>/1/mountinfo) and NFS statistics (<proc-root>/1/mountstats),
    finds the kubelet's volume mounts (<kubelet-root>/pods/<pod-uid>/volumes/
    kubernetes.io~csi/<pv>/mount, kubernetes.io~nfs/<volume>, and CSI staging
    mounts under plugins/kubernetes.io/csi) and writes the cluster-scoped
    NodeMountReport named after --node-name: for each volume its pod, effective
    options (kernel defaults included), superblock and the other mounts sharing
    it (they share its options), server and how many mounts use it (nconnect is
    fixed by the first), and per-operation RPC totals.

    Each volume also gets its recent activity (read and write bytes per second,
    retransmissions, major timeouts and reconnects over --activity-window) and
    how often its pod's processes were in uninterruptible sleep (D), sampled
    --process-samples times a scan from /proc/<pid>/stat, with the ones stuck
    in D at the last sample (stuckProcesses: pid, command, where it waits).

    The report's failures say how the node's mounts broke (docs/runbook.md):
    StaleFileHandle (a pod volume's statvfs() got ESTALE: the server no longer
    knows its directory), ServerNotResponding (per server: the probe got no
    answer or a soft mount's EIO, the kernel log says 'not responding' until
    'OK' (--kernel-log), mountstats counts major timeouts; hard mounts wait,
    soft ones fail), MountHelperStuck (mount.nfs or umount.nfs alive past
    --helper-stuck-after) and TLSTunnelDown (a mount of 127.0.0.1 on a tunnel
    port with nothing listening there in the host's network namespace).

    The report is written only when something other than the counters changed,
    and as a heartbeat every --heartbeat seconds; /metrics serves live rates
    (mountwarden_nfs_operations_per_second, ..._rtt_milliseconds,
    ..._execute_milliseconds, ..._queue_milliseconds by node, namespace,
    workload, pod_uid, volume, op; ..._read_bytes_per_second, ..._write_bytes_per_second,
    ..._retransmissions_per_second, ..._major_timeouts_per_second,
    ..._reconnects_per_second, ..._uninterruptible_share by node, namespace,
    workload, pod_uid, volume; at most --max-volume-series volumes) and the
    agent's health. A failed scan or write is logged, counted and
    retried at the next scan. The agent refuses to write when --node-name is
    not a node, or names another machine (the Node's boot ID differs from this
    kernel's): exit code 2.

    In a pod: mount the host's /proc read-only at /host/proc and pass
    --proc-root /host/proc; no hostPID is needed. The service account needs
    get on nodes and get, create and update on nodemountreports.mountwarden.io; with
    --name-pods (the default), also list and watch on pods (it watches its own node's pods
    only, to name each volume's pod, controller and claim) and get on persistentvolumeclaims.
    Privileges, by feature (docs/security.md): the host's mount table and
    /proc/locks need none, its NFS statistics uid 0; the statvfs() probe
    (--probe statvfs) reaches each mount through /proc/1/root, which needs
    CAP_SYS_PTRACE; the SQLite scan (--sqlite-scan) reads other processes'
    open files and memory maps, which needs CAP_SYS_PTRACE and
    CAP_DAC_READ_SEARCH. Without root: --mount-table own with the kubelet's
    pods directory propagated in, and --probe null (the chart's
    agent.root=false).
    """
    from kubernetes.config import ConfigException

    from mountwarden.adapters.kube import api_client
    from mountwarden.adapters.procreader import ProcRoot
    from mountwarden.agent.loop import (
        Agent,
        AgentSettings,
        PrintedReport,
        ReportSink,
        host_boot_id,
        run_agent,
    )
    from mountwarden.agent.pods import NodePods
    from mountwarden.agent.report import RefusedWrite, ReportWriter
    from mountwarden.agent.sqlitescan import report_findings
    from mountwarden.agent.userspace import scan_nfs_sockets

    # force: this command owns the process's logging (and a test runner may have configured it before).
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not node_name.strip():
        fail("--node-name (or NODE_NAME) is empty")
    settings = AgentSettings(
        node_name=node_name,
        proc_root=proc_root,
        kubelet_root=kubelet_root,
        network_fstypes=_fstypes(network_fstypes),
        interval_seconds=interval,
        metrics_port=0 if once else metrics_port,
        probe_timeout_seconds=probe_timeout,
        process_samples=process_samples,
        activity_window_seconds=activity_window,
        kernel_log=kernel_log or None,
        helper_stuck_seconds=helper_stuck_after,
        max_volume_series=max_volume_series,
        mount_table=1 if mount_table is MountTable.HOST else "self",
        probe=probe.value,
    )
    sink: ReportSink
    client = None
    if dry_run:
        sink = PrintedReport()
    else:
        try:
            client = api_client(kubeconfig)
        except ConfigException as error:
            fail(f"no cluster to write to ({escape(str(error))}): pass --kubeconfig, run in a pod, or use --dry-run")
        sink = ReportWriter(client, node_name, heartbeat_seconds=heartbeat,
                            host_boot_id=host_boot_id(ProcRoot(proc_root)))
    agent = Agent(settings, sink, sqlite_scan=report_findings if sqlite_scan else None,
                  userspace_scan=scan_nfs_sockets if sqlite_scan else None)
    if client is not None and name_pods:
        agent.pods = NodePods(client, node_name, on_change=agent.pod_changed)
    try:
        succeeded = run_agent(agent, once=once)
    except RefusedWrite as refusal:
        fail(f"refusing to write: {escape(str(refusal))}")
    except OSError as error:  # the metrics port is taken
        fail(f"cannot serve metrics on port {metrics_port}: {escape(str(error))}")
    raise typer.Exit(0 if succeeded else 1)


def _policy_from_profile(path: Path) -> tuple[ResolvedPolicy, list[str], list[str], str]:
    from mountwarden.api.storageprofile import KIND, StorageProfileSpec

    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
    except OSError as error:
        fail(f"cannot read {escape(str(path))}: {escape(error.strerror or str(error))}")
    except yaml.YAMLError as error:
        fail(f"{escape(str(path))} is not YAML: {escape(str(error))}")
    profiles = [doc for doc in documents if doc.get("kind") == KIND] or [doc for doc in documents if "spec" in doc]
    if len(profiles) != 1:
        fail(f"{escape(str(path))} must hold exactly one StorageProfile (found {len(profiles)})")
    (document,) = profiles
    try:
        spec = StorageProfileSpec.model_validate(document.get("spec") or {})
    except ValidationError as error:
        fail(f"{escape(str(path))} is not a valid StorageProfile:\n{escape(str(error))}")
    policy = spec.resolve()
    if policy.errors:
        fail(f"{escape(str(path))} contradicts itself:\n" + "\n".join(escape(str(p)) for p in policy.errors))
    name = (document.get("metadata") or {}).get("name", path.name)
    return policy, list(spec.required_options), list(spec.forbidden_options), f"StorageProfile {name} ({path})"


def _operations_json(volume: NodeVolume) -> dict[str, dict[str, Any]]:
    from mountwarden.agent.scan import MAX_REPORTED_OPERATIONS

    busiest = list(volume.operations.items())[:MAX_REPORTED_OPERATIONS]
    return {
        name: {"ops": totals.ops, "errors": totals.errors, "avg_rtt_ms": totals.avg_rtt_ms,
               "avg_execute_ms": totals.avg_execute_ms, "avg_queue_ms": totals.avg_queue_ms}
        for name, totals in busiest
    }


def _volume_json(volume: NodeVolume, result: CheckResult | None) -> dict[str, Any]:
    return {
        "pod_uid": volume.pod_uid,
        "volume_name": volume.volume_name,
        "plugin": str(volume.plugin),
        "driver": volume.driver,
        "mount_point": volume.mount_point,
        "fstype": volume.fstype,
        "source": volume.source,
        "server": volume.server,
        "export": volume.export,
        "superblock": volume.superblock,
        "shared_with": list(volume.shared_with),
        "server_mounts": volume.server_mounts,
        "connections": volume.connections,
        "nfs_version": volume.nfs_version,
        "options_source": str(volume.options_source),
        "effective_options": list(volume.effective_options),
        "operations": _operations_json(volume),
        "notes": list(volume.notes),
        "compliant": result.compliant if result else True,
        "findings": [finding.to_dict() for finding in result.findings] if result else [],
    }


_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _print_volume(volume: NodeVolume, result: CheckResult | None) -> None:
    owner = f"pod {volume.pod_uid}" if volume.pod_uid else f"CSI staging ({volume.driver or 'driver unknown'})"
    console.print(f"[bold]{escape(owner)}[/] volume [bold]{escape(volume.volume_name)}[/] ({volume.plugin})")
    console.print(f"  mounted on {escape(volume.mount_point)}")
    console.print(f"  {escape(volume.source)} ({volume.fstype} {volume.nfs_version or ''}), superblock "
                  f"{volume.superblock}, {volume.server_mounts} mount(s) of this server, "
                  f"{volume.connections if volume.connections is not None else '?'} connection(s)")
    for other in volume.shared_with:
        console.print(f"  shares its superblock with {escape(other)}")
    console.print(f"  options ({volume.options_source}): {escape(','.join(volume.effective_options))}")
    for note in volume.notes:
        console.print(f"  [dim]note: {escape(note)}[/]")
    if result is None:
        console.print()
        return
    if result.compliant:
        console.print("  [green]compliant[/]")
    for finding in result.findings:
        style = _SEVERITY_STYLE.get(str(finding.severity), "")
        console.print(f"  [{style}]{finding.severity}[/] {finding.reason}: {escape(finding.message)}")
    # Every option mismatch has the same remedy: say each one once.
    for remedy in dict.fromkeys(finding.remedy for finding in result.findings if finding.remedy):
        console.print(f"  [bold]fix:[/] {escape(remedy)}")
    console.print()


@app.command("audit")
def audit_command(
    proc_root: ProcRootOption,
    profile: Annotated[Path | None, typer.Option(
        "--profile", metavar="FILE", help="A StorageProfile YAML file: check every volume against its options, "
        "requiredOptions and forbiddenOptions.")] = None,
    preset: Annotated[CachePolicy | None, typer.Option(
        "--preset", help="Check every volume against a cache-policy preset instead.")] = None,
    efs: Annotated[bool, typer.Option(
        "--efs", help="With --preset: layer the AWS EFS baseline under it (vers=4.1, 1 MiB rsize/wsize, hard, "
        "timeo=600, retrans=2, noresvport), as a profile for efs.csi.aws.com does.")] = False,
    kubelet_root: KubeletRootOption = DEFAULT_KUBELET_ROOT,
    network_fstypes: NetworkFstypesOption = DEFAULT_FSTYPES_TEXT,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Audit one machine without a cluster: every pod volume's effective options, checked against a contract.

    Reads <proc-root>/1/mountinfo and 1/mountstats as the agent does and lists
    every pod volume (and CSI staging mount) on network storage: its pod and
    volume, mount point, source, superblock and the other mounts sharing it,
    the number of mounts of its server, its connections, and its effective
    options (from mountstats when it has them, else from mountinfo with the
    kernel defaults filled in).

    With --profile or --preset, each volume is checked against the declared
    options. A finding has a reason: OptionMismatch (an option in effect
    differs), UndeclaredOption (an option that changes behaviour is in effect
    although nothing declares it: sync, noac, ac* times, lookupcache, nocto,
    soft, nolock, local_lock), SuperblockShared (it differs in timeo, retrans,
    resvport or nconnect and another mount shares the superblock, whose values
    the first mount fixed: move or restart the other consumer, or mount with
    nosharecache, which nfs(5) calls a data risk: cached copies of one file on
    one client can get out of sync) or NconnectIgnored (the server's first
    mount fixed the number of connections).

    JSON: {proc_root, kubelet_roots, policy {source, options, required,
    forbidden}, compliant, volumes [{pod_uid, volume_name, plugin, driver,
    mount_point, fstype, source, server, export, superblock, shared_with,
    server_mounts, connections, nfs_version, options_source,
    effective_options, operations, notes, compliant, findings [{reason,
    severity, message, remedy, option, expected, actual, other_mounts}]}],
    skipped_lines}.

    Exit code: 0 compliant (or no contract given), 1 findings, 2 bad input.
    """
    from mountwarden.adapters.procreader import ProcRoot
    from mountwarden.agent.scan import ScanError, kubelet_roots, scan_proc_root

    if profile is not None and preset is not None:
        fail("give --profile FILE or --preset NAME, not both")
    if efs and preset is None:
        fail("--efs applies to --preset only (a profile names its provisioner)")
    policy: ResolvedPolicy | None = None
    required: list[str] = []
    forbidden: list[str] = []
    source: str | None = None
    if profile is not None:
        policy, required, forbidden, source = _policy_from_profile(profile)
    elif preset is not None:
        # Any provisioner but EFS's leaves the EFS baseline out.
        policy = resolve_policy(provisioner=EFS_PROVISIONER if efs else "", cache_policy=preset.value)
        source = f"preset {preset.value}" + (" on EFS" if efs else "")

    if not proc_root.is_dir():
        fail(f"{escape(str(proc_root))} is not a directory")
    proc = ProcRoot(proc_root)
    try:
        scan = scan_proc_root(proc, kubelet_root=kubelet_root, network_fstypes=_fstypes(network_fstypes))
    except ScanError as error:
        fail(escape(str(error)))
    checks = [
        (volume, check_volume(volume, policy.options, required=required, forbidden=forbidden) if policy else None)
        for volume in scan.volumes
    ]
    compliant = all(result is None or result.compliant for _, result in checks)

    if json_output:
        print_json({
            "proc_root": str(proc_root),
            "kubelet_roots": kubelet_roots(proc, kubelet_root),
            "policy": None if policy is None else {
                "source": source, "options": policy.mount_options, "required": required, "forbidden": forbidden,
            },
            "compliant": compliant,
            "volumes": [_volume_json(volume, result) for volume, result in checks],
            "skipped_lines": scan.skipped_lines,
        })
    else:
        if source is not None and policy is not None:
            console.print(f"Checking against {escape(source)}: {escape(','.join(policy.mount_options))}\n")
        for volume, result in checks:
            _print_volume(volume, result)
        with_findings = sum(1 for _, result in checks if result is not None and not result.compliant)
        if not checks:
            console.print(f"No pod volume on {', '.join(_fstypes(network_fstypes))} under "
                          f"{escape(kubelet_root)} in {escape(str(proc_root))}.")
        else:
            console.print(f"{len(checks)} volume(s), {with_findings} with findings.")
        if scan.skipped_lines:
            err_console.print(f"[yellow]warning:[/] skipped {scan.skipped_lines} malformed /proc line(s)")
    raise typer.Exit(0 if compliant else 1)
