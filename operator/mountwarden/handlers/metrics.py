"""The operator's Prometheus metrics (served on --metrics-port).

The chart's PrometheusRule (metrics.prometheusRule) alerts on these names; a unit test
checks that every name it uses is one defined here.
"""

import collections
import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import Counter, Gauge, start_http_server

from mountwarden.core.credits import CreditState
from mountwarden.core.credits.consumers import ConsumerSummary
from mountwarden.core.credits.crossaz import CrossAzCheck
from mountwarden.core.findings import Finding
from mountwarden.core.inventory import Inventory
from mountwarden.core.rollout import Phase, State

_CREDIT_LABELS = ("profile", "file_system_id")
CREDIT_BALANCE = Gauge("mountwarden_credit_balance_bytes", "EFS BurstCreditBalance", _CREDIT_LABELS)
CREDIT_SLOPE = Gauge("mountwarden_credit_slope_bytes_per_second",
                     "Robust slope of the burst-credit balance (negative: draining)", _CREDIT_LABELS)
CREDIT_TIME_TO_EMPTY = Gauge("mountwarden_credit_time_to_empty_seconds",
                             "Seconds until the balance is empty, as projected by status.credits.timeToEmptyBasis (absent: not draining)",
                             _CREDIT_LABELS)
CREDIT_PERMITTED = Gauge("mountwarden_credit_permitted_bytes_per_second", "EFS PermittedThroughput", _CREDIT_LABELS)
CREDIT_METERED = Gauge("mountwarden_credit_metered_bytes_per_second", "EFS metered throughput", _CREDIT_LABELS)
CREDIT_NET_CHANGE = Gauge("mountwarden_credit_net_change_bytes_per_day",
                          "Mean balance of the last 24 h minus the 24 h before (absent: under 48 h of history)",
                          _CREDIT_LABELS)
CREDIT_IO_LIMIT = Gauge("mountwarden_credit_percent_io_limit", "EFS PercentIOLimit (General Purpose mode)",
                        _CREDIT_LABELS)
CREDIT_ELASTIC_COST = Gauge("mountwarden_credit_elastic_monthly_cost_usd",
                            "Estimated US dollars a month in Elastic mode for the load observed (a lower bound)",
                            _CREDIT_LABELS)
CREDIT_STATE = Gauge("mountwarden_credit_state",
                     "1 for the forecast's current state (Healthy, Draining, Empty, Trap, Unknown), 0 for the others",
                     (*_CREDIT_LABELS, "state"))
CONSUMER_METERED = Gauge("mountwarden_credit_consumer_metered_bytes_per_second",
                         "Estimated metered bytes per second of one of a file system's busiest consumers "
                         "(node reports: average since the mount)",
                         ("file_system_id", "profile", "node", "pod", "volume"))
PROFILE_METERED = Gauge("mountwarden_credit_profile_metered_bytes_per_second",
                        "Estimated metered bytes per second of a profile's consumers on a file system (node reports)",
                        ("file_system_id", "profile"))

NAMESPACE_METERED = Gauge("mountwarden_credit_namespace_metered_bytes_per_second",
                          "Estimated metered bytes per second of one namespace's pods on a file system (node reports)",
                          ("file_system_id", "namespace"))
NAMESPACE_COST = Gauge("mountwarden_credit_namespace_monthly_cost_usd",
                       "One namespace's share of a file system's throughput bill a month at its throughput mode "
                       "(absent in Bursting, which bills no throughput)", ("file_system_id", "namespace"))

_CREDIT_GAUGES = {
    "balanceBytes": CREDIT_BALANCE,
    "slopeBytesPerSecond": CREDIT_SLOPE,
    "timeToEmptySeconds": CREDIT_TIME_TO_EMPTY,
    "permittedBytesPerSecond": CREDIT_PERMITTED,
    "meteredBytesPerSecond": CREDIT_METERED,
    "netChangePerDayBytes": CREDIT_NET_CHANGE,
    "percentIoLimit": CREDIT_IO_LIMIT,
}


def record_credits(profile: str, credits: dict) -> None:
    """Set the credit gauges from a status.credits object; a missing value removes its series."""
    labels = (profile, credits["fileSystemId"])
    values = {key: credits.get(key) for key in _CREDIT_GAUGES}
    values_of = {**{gauge: values[key] for key, gauge in _CREDIT_GAUGES.items()},
                 CREDIT_ELASTIC_COST: (credits.get("elasticEstimate") or {}).get("monthlyCostUsd")}
    for gauge, value in values_of.items():
        if value is None:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        else:
            gauge.labels(*labels).set(value)
    for state in CreditState:
        CREDIT_STATE.labels(*labels, state.value).set(1 if credits.get("state") == state.value else 0)


_consumer_series: dict[str, set[tuple[str, ...]]] = {}
_profile_series: dict[str, set[tuple[str, ...]]] = {}
_consumers_lock = threading.Lock()


def record_consumers(file_system_id: str, summary: ConsumerSummary) -> None:
    """Set a file system's consumer gauges (its busiest consumers only); series no longer there are removed."""
    consumers = {
        (file_system_id, ",".join(c.profiles), c.node, ",".join(c.pods), ",".join(c.volumes)):
            c.metered_bytes_per_second
        for c in summary.top if c.metered_bytes_per_second is not None
    }
    profiles = {(file_system_id, usage.profile): usage.metered_bytes_per_second for usage in summary.profiles}
    with _consumers_lock:
        _replace_series(CONSUMER_METERED, _consumer_series, file_system_id, consumers)
        _replace_series(PROFILE_METERED, _profile_series, file_system_id, profiles)


CROSS_AZ_BYTES = Gauge("mountwarden_cross_az_bytes_per_second",
                       "READ and WRITE payload a second of a pod volume whose EFS mount target is in another zone "
                       "than its node (CrossAZMount)", ("file_system_id", "namespace", "pod", "volume"))
CROSS_AZ_COST = Gauge("mountwarden_cross_az_monthly_cost_usd",
                      "Cross-zone transfer a month of a file system's pod volumes that talk to another zone's mount "
                      "target, at $0.01/GB (a lower bound)", ("file_system_id",))
_cross_az_series: dict[str, set[tuple[str, ...]]] = {}
_cross_az_cost_series: dict[str, set[tuple[str, ...]]] = {}


def record_cross_az(file_system_id: str, check: CrossAzCheck | None) -> None:
    """Set a file system's cross-zone gauges from its latest check (None: mount targets unknown, nothing set)."""
    mounts = check.mounts if check is not None else ()
    rates = {(file_system_id, *mount.pod.split("/", 1), mount.volume): mount.bytes_per_second
             for mount in mounts if mount.bytes_per_second is not None}
    total = check.to_json().get("monthlyCostUsd") if check is not None else None
    with _consumers_lock:
        _replace_series(CROSS_AZ_BYTES, _cross_az_series, file_system_id, rates)
        _replace_series(CROSS_AZ_COST, _cross_az_cost_series, file_system_id,
                        {(file_system_id,): total} if total is not None else {})


_namespace_series: dict[str, set[tuple[str, ...]]] = {}
_cost_series: dict[str, set[tuple[str, ...]]] = {}


def record_namespace_costs(file_system_id: str, namespaces: list[dict]) -> None:
    """Set a file system's per-namespace gauges from status.credits.consumers.namespaces; gone ones removed."""
    metered = {(file_system_id, row["namespace"]): row["meteredBytesPerSecond"] for row in namespaces}
    costs = {(file_system_id, row["namespace"]): row["monthlyCostUsd"] for row in namespaces
             if row.get("monthlyCostUsd") is not None}
    with _consumers_lock:
        _replace_series(NAMESPACE_METERED, _namespace_series, file_system_id, metered)
        _replace_series(NAMESPACE_COST, _cost_series, file_system_id, costs)


def _replace_series(gauge: Gauge, known: dict, key: object,
                    values: dict[tuple[str, ...], float]) -> None:
    for gone in known.get(key, set()) - set(values):
        with contextlib.suppress(KeyError):
            gauge.remove(*gone)
    for labels, value in values.items():
        gauge.labels(*labels).set(value)
    known[key] = set(values)


def serve(port: int, address: str = "0.0.0.0") -> None:
    if port:
        start_http_server(port, addr=address)

PROFILE_VOLUMES = Gauge("mountwarden_profile_volumes", "Pod volumes of a profile by verdict (node reports)",
                        ("profile", "state"))
PROFILE_PODS = Gauge("mountwarden_profile_pods", "Pods using a profile's volumes by their worst verdict",
                     ("profile", "state"))
SQLITE_DATABASES = Gauge("mountwarden_sqlite_databases", "SQLite databases in use on a profile's volumes",
                         ("profile",))


def record_compliance(profile: str, counts: dict[str, dict[str, int]], sqlite_databases: int) -> None:
    for state, number in counts["volumes"].items():
        PROFILE_VOLUMES.labels(profile, state).set(number)
    for state, number in counts["pods"].items():
        PROFILE_PODS.labels(profile, state).set(number)
    SQLITE_DATABASES.labels(profile).set(sqlite_databases)


FINDINGS = Gauge("mountwarden_findings", "Findings now, by the profile whose contract they concern, what found them, "
                 "the namespace and workload of their pod (empty for a finding on a profile), their reason and "
                 "severity (the same findings as the PolicyReport results and Events)",
                 ("profile", "source", "namespace", "workload", "reason", "severity"))
#: At most this many mountwarden_findings series (a label set is a profile, source, workload, reason and severity,
#: never a pod): past it the least severe are left out and counted in mountwarden_findings_over_cap.
MAX_FINDING_SERIES = 5000
FINDINGS_OVER_CAP = Gauge("mountwarden_findings_over_cap",
                          f"Label sets of mountwarden_findings not served: past {MAX_FINDING_SERIES} series, the "
                          "least severe are left out (status, Events and PolicyReports still hold them)")
_finding_series: dict[tuple[str, str], set[tuple[str, ...]]] = {}
_findings_over_cap: dict[tuple[str, str], int] = {}
_findings_lock = threading.Lock()


def _no_workload(uid: str) -> str:
    return ""


def record_findings(profile: str, source: str, findings: Iterable[Finding],
                    workload_of: Callable[[str], str] = _no_workload) -> None:
    """Set a profile's finding counts of one source, by namespace and workload; those no longer found are removed.

    ``workload_of``: a pod UID's workload (Kind/name). The series of all profiles stay within MAX_FINDING_SERIES.
    """
    counts: collections.Counter = collections.Counter()
    rank: dict[tuple[str, ...], int] = {}
    for finding in findings:
        if not finding.counts:
            continue
        subject = finding.subject
        namespace = (subject.namespace or "") if subject is not None else ""
        workload = workload_of(subject.uid) if subject is not None and subject.kind == "Pod" and subject.uid else ""
        labels = (profile, source, namespace, workload, str(finding.reason), str(finding.severity))
        counts[labels] += 1
        rank[labels] = finding.severity.rank
    with _findings_lock:
        key = (profile, source)
        others = sum(len(series) for other, series in _finding_series.items() if other != key)
        room = max(0, MAX_FINDING_SERIES - others)
        kept = sorted(counts, key=lambda labels: (-rank[labels], -counts[labels], labels))[:room]
        _findings_over_cap[key] = len(counts) - len(kept)
        FINDINGS_OVER_CAP.set(sum(_findings_over_cap.values()))
        _replace_series(FINDINGS, _finding_series, key, {labels: counts[labels] for labels in kept})


MOUNT_FAILURES = Gauge(
    "mountwarden_mount_failures", "Mount failures on a node now, by reason and severity (StaleFileHandle, "
    "ServerNotResponding, StuckTerminating, OrphanedMount, MountHelperStuck, TLSTunnelDown): the same findings as "
    "their Events and PolicyReport results", ("node", "reason", "severity"))
_failure_series: dict[str, set[tuple[str, ...]]] = {}


def record_mount_failures(node: str, findings: Iterable[Finding]) -> None:
    """Set a node's failure counts; the reasons no longer found (or a node gone: no findings) are removed."""
    counts = collections.Counter((node, str(f.reason), str(f.severity)) for f in findings)
    with _findings_lock:
        _replace_series(MOUNT_FAILURES, _failure_series, node, dict(counts))


STALE_HANDLE_EVICTIONS = Counter(
    "mountwarden_stale_handle_evictions", "Evictions of pods on a stale file handle that a profile's "
    "spec.remediation.staleFileHandle: Evict asked for, by outcome: evicted, or refused (a PodDisruptionBudget "
    "allowed no disruption)", ("profile", "outcome"))

NETWORK_VOLUMES = Gauge("mountwarden_network_volumes",
                        "PersistentVolumes on network storage by file system and whether a StorageProfile governs "
                        "them (governed, ungoverned: held to the baseline, adoption-pending), from the inventory",
                        ("file_system", "governance"))
_inventory_series: set[tuple[str, str]] = set()
_inventory_lock = threading.Lock()


def record_inventory(inventory: Inventory) -> None:
    """Set the volumes of every file system of the inventory; file systems gone lose their series."""
    counts: collections.Counter = collections.Counter()
    for fs in inventory.file_systems:
        for governance in ("governed", "ungoverned", "adoption-pending"):
            counts[(fs.name, governance)] += 0
        for volume in fs.volumes:
            pending = bool(volume.adoption and volume.adoption["state"] == "Pending")
            governance = "governed" if volume.governed_by else "adoption-pending" if pending else "ungoverned"
            counts[(fs.name, governance)] += 1
    with _inventory_lock:
        for gone in _inventory_series - set(counts):
            with contextlib.suppress(KeyError):
                NETWORK_VOLUMES.remove(*gone)
        for labels, number in counts.items():
            NETWORK_VOLUMES.labels(*labels).set(number)
        _inventory_series.clear()
        _inventory_series.update(counts)


REPORT_ENTRIES_DROPPED = Counter(
    "mountwarden_report_entries_dropped",
    "Entries of a node's report naming a pod not scheduled on that node (reason other-node), or no known pod "
    "(unknown-pod), ignored", ("node", "reason"))
REPORT_WRITES_COALESCED = Counter(
    "mountwarden_report_writes_coalesced",
    "Writes of a node's report skipped because the node wrote again within --report-min-interval: only its "
    "latest report is handled, at that pace (mountwarden.core.node.pace)", ("node",))
REPORT_HANDLINGS = Counter(
    "mountwarden_report_handlings",
    "Handlings of a node's report (its failures, its pods' Events, the rollouts waiting on it): at most one per "
    "--report-min-interval, whatever the node writes", ("node",))
POSTED_FINDINGS = Gauge("mountwarden_posted_findings",
                        "Findings remembered as already posted as pod Events (bounded, expiring after an hour)")

UNVERIFIED_VOLUMES = Gauge(
    "mountwarden_unverified_volumes", "Pod volumes of a profile whose node's report cannot confirm them, by node and "
    "why: ReportMissing (no report: no agent runs there), NoAgent (a node where no agent can run: Fargate, "
    "virtual nodes), ReportStale (the agent stopped writing), NotMounted, NotScheduled (node empty)", ("profile", "node", "reason"))
_unverified_series: dict[str, set[tuple[str, ...]]] = {}


def record_unverified(profile: str, volumes: Mapping[tuple[str, str], int]) -> None:
    """Set a profile's unverified volumes by (node, reason); the pairs no longer there are removed."""
    with _findings_lock:
        _replace_series(UNVERIFIED_VOLUMES, _unverified_series, profile,
                        {(profile, node, reason): number for (node, reason), number in volumes.items()})


ROLLOUT_PHASE = Gauge("mountwarden_rollout_phase", "1 for the phase of a profile's rollout (status.rollout.phase: "
                      "AwaitingApproval, Progressing, Paused, Waiting, AwaitingMigration, Complete), 0 for the others",
                      ("profile", "phase"))
ROLLOUT_WORKLOADS_HELD = Gauge(
    "mountwarden_rollout_workloads_held", "1 for each workload of a profile's rollout that is Blocked (the rollout is "
    "Paused) or Waiting (a PodDisruptionBudget allows no eviction: reason DisruptionBudget; or zero replicas), by "
    "its state and reason", ("profile", "namespace", "workload", "state", "reason"))
_rollout_series: dict[str, set[tuple[str, ...]]] = {}


def record_rollout(profile: str, rollout: Mapping | None) -> None:
    """Set a profile's rollout gauges from status.rollout (None: no rollout, nothing held)."""
    rollout = rollout or {}
    for phase in Phase:
        ROLLOUT_PHASE.labels(profile, str(phase)).set(1 if rollout.get("phase") == phase else 0)
    held = {(profile, line.get("namespace") or "", f"{line.get('kind')}/{line.get('name')}", line["state"],
             line.get("reason") or ""): 1
            for line in rollout.get("workloads") or () if line.get("state") in (State.BLOCKED, State.WAITING)}
    with _findings_lock:
        _replace_series(ROLLOUT_WORKLOADS_HELD, _rollout_series, profile, held)


#: The gauges labelled by one profile: a deleted profile's series go with it.
_PROFILE_GAUGES = (CREDIT_BALANCE, CREDIT_SLOPE, CREDIT_TIME_TO_EMPTY, CREDIT_PERMITTED, CREDIT_METERED,
                   CREDIT_NET_CHANGE, CREDIT_IO_LIMIT, CREDIT_ELASTIC_COST, CREDIT_STATE, PROFILE_METERED,
                   PROFILE_VOLUMES, PROFILE_PODS, SQLITE_DATABASES, FINDINGS, UNVERIFIED_VOLUMES, ROLLOUT_PHASE,
                   ROLLOUT_WORKLOADS_HELD)


def forget_profile(profile: str) -> None:
    """Remove every series of a deleted profile, so that the metrics neither outlive it nor grow with churn."""
    for gauge in _PROFILE_GAUGES:
        gauge.remove_by_labels({"profile": profile})
    with _findings_lock:
        for key in [key for key in _finding_series if key[0] == profile]:
            del _finding_series[key]
            _findings_over_cap.pop(key, None)
        FINDINGS_OVER_CAP.set(sum(_findings_over_cap.values()))
        _unverified_series.pop(profile, None)
        _rollout_series.pop(profile, None)
    with _consumers_lock:
        # A consumer's series names every profile of its volumes, comma-joined.
        for file_system_id, series in _consumer_series.items():
            gone = {labels for labels in series if profile in labels[1].split(",")}
            for labels in gone:
                with contextlib.suppress(KeyError):
                    CONSUMER_METERED.remove(*labels)
            _consumer_series[file_system_id] = series - gone
        for file_system_id, series in _profile_series.items():
            _profile_series[file_system_id] = {labels for labels in series if labels[1] != profile}
