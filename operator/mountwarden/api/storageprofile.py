"""StorageProfile: one consumer pattern's mount contract (cluster-scoped, mountwarden.io/v1alpha1).

These models are the single source of the CRD schema (``mountwarden crds``), the
reference docs and the operator's validation.
"""

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from mountwarden.api.base import ApiModel, Condition, LabelSelector
from mountwarden.core.adoption import Adopter, AdoptionPhase
from mountwarden.core.compliance import Contract
from mountwarden.core.node.activity import Thresholds, efs_file_system_limit
from mountwarden.core.options.presets import EFS_PROVISIONER, CachePolicy
from mountwarden.core.policy import ResolvedPolicy, backend_kind, resolve_policy
from mountwarden.core.rollout import LISTED_CONSUMERS
from mountwarden.core.rollout import Phase as RolloutPhase
from mountwarden.core.rollout import State as RolloutWorkloadState
from mountwarden.core.selectors import LABEL_VALUE_MAX
from mountwarden.core.serverload import SERVER_NAME_MAX, SERVERS_MAX
from mountwarden.core.storageclass import DesiredClass
from mountwarden.core.vocabulary import (
    BackendKind,
    Enforcement,
    RolloutApproval,
    RolloutStrategy,
    SqlitePolicy,
    StaleHandleRemedy,
)

KIND = "StorageProfile"
PLURAL = "storageprofiles"

#: A profile's name is the value of the label mountwarden.io/profile on its StorageClasses, and is listed by it: a
#: longer one would fail every write and every list, its finalizer never removed. The API server refuses it.
NAME_RULE = {
    "rule": f"size(self.metadata.name) <= {LABEL_VALUE_MAX}",
    "message": f"a StorageProfile's name is the value of the label mountwarden.io/profile on its StorageClasses: "
               f"at most {LABEL_VALUE_MAX} characters; choose a shorter name",
    "reason": "FieldValueInvalid",
}


class ReclaimPolicy(StrEnum):
    DELETE = "Delete"
    RETAIN = "Retain"


class VolumeBindingMode(StrEnum):
    IMMEDIATE = "Immediate"
    WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class Backend(ApiModel):
    """Where the volumes come from: the CSI provisioner and its StorageClass parameters."""

    kind: BackendKind | None = Field(
        default=None,
        description="What serves the volumes, so that validation and advice fit it: efs (AWS EFS), nfs (a "
        "generic NFS server) or nfsv3-gateway (an NFSv3-only gateway such as an S3-backed NFS gateway: vers=3 with "
        "explicit port and mountport, no rpcbind, and one node's network interface for every client). Defaults "
        "to efs for efs.csi.aws.com, nfs otherwise.",
    )
    provisioner: str = Field(
        min_length=1,
        description="CSI provisioner of the StorageClasses, e.g. efs.csi.aws.com or nfs.csi.k8s.io. "
        "efs.csi.aws.com layers the AWS-recommended EFS baseline options under the preset.",
    )
    parameters: dict[str, str] = Field(
        default_factory=dict,
        description="StorageClass parameters passed to the provisioner, e.g. provisioningMode: efs-ap and "
        "fileSystemId: fs-0123456789abcdef0 for EFS.",
    )
    reclaim_policy: ReclaimPolicy = Field(default=ReclaimPolicy.DELETE, description="Delete or Retain.")
    volume_binding_mode: VolumeBindingMode = Field(
        default=VolumeBindingMode.IMMEDIATE, description="Immediate or WaitForFirstConsumer."
    )
    allow_volume_expansion: bool | None = Field(default=None, description="Whether PVCs of this class may grow.")


class Consumers(ApiModel):
    """Which PersistentVolumeClaims this profile governs. Both selectors must match."""

    namespace_selector: LabelSelector | None = Field(
        default=None, description="Namespaces whose PVCs this profile governs (by namespace labels)."
    )
    pvc_selector: LabelSelector | None = Field(default=None, description="PVCs this profile governs (by PVC labels).")


class Rollout(ApiModel):
    """How a change of effective options reaches volumes that are already bound."""

    strategy: RolloutStrategy = Field(
        default=RolloutStrategy.NEW_STORAGE_CLASS,
        description="NewStorageClass: bound volumes keep their options, new PVCs get the new class. "
        "PatchBoundVolumes: patch each bound PV's mountOptions, then restart its consumers one workload at a time.",
    )
    approval: RolloutApproval = Field(
        default=RolloutApproval.MANUAL,
        description="Manual waits for the annotation mountwarden.io/approve-rollout: \"<version>\"; "
        "Automatic starts at once.",
    )
    max_concurrent_workloads: int = Field(
        default=1, ge=1, le=50, description="Workloads restarted at the same time (1: strictly one after another)."
    )
    verify_timeout_seconds: int = Field(
        default=600, ge=30, le=86400,
        description="How long to wait for the node reports to confirm a restarted workload's options before pausing.",
    )


class Remediation(ApiModel):
    """What mountwarden may do by itself when these volumes break; off by default: every failure says what to do,
    and only a stale file handle has a remedy safe to apply unattended (docs/runbook.md)."""

    stale_file_handle: StaleHandleRemedy = Field(
        default=StaleHandleRemedy.NONE,
        description="Evict: evict each pod whose volume has a stale file handle (StaleFileHandle) so that its "
        "controller recreates it and it mounts afresh, through the Eviction API as a rollout does "
        "(PodDisruptionBudgets hold), one pod of this profile at a time, each pod at most once per windowSeconds, "
        "never a pod no controller recreates; every eviction is an Event and counted in "
        "mountwarden_stale_handle_evictions_total. None: the finding only.",
    )
    window_seconds: int = Field(
        default=3600, ge=60, le=604800,
        description="A pod is evicted at most once in this many seconds (one that does not go is not asked again).",
    )


class Adopt(ApiModel):
    """Classes and PersistentVolumes that were there before this profile, for it to take over."""

    storage_class_names: list[str] = Field(
        default_factory=list,
        description="StorageClasses whose bound PersistentVolumes this profile takes over. The class is kept and "
        "annotated mountwarden.io/adopted-by and mountwarden.io/superseded-by (admission then tells whoever "
        "creates a claim of it to use this profile's class, and a volume its provisioner still makes is adopted "
        "at the next approval); with spec.default: true its default-class annotation moves to this profile's "
        "class. Refused (status.adoption.refused, an AdoptionRefused Event): a class another profile governs or "
        "adopts (the profile created first keeps it), a class of another provisioner than "
        "spec.backend.provisioner.",
    )
    volume_selector: LabelSelector | None = Field(
        default=None,
        description="PersistentVolumes to take over by their labels, whatever their class. Refused: a volume not "
        "on network storage, one another profile governs or adopts (the profile created first keeps it), one "
        "made by another provisioner than spec.backend.provisioner.",
    )


class Throughput(ApiModel):
    """What bounds a mount's throughput: the per-flow cap, and what nconnect advice is sized from."""

    per_flow_cap_gbps: float = Field(
        default=5.0, ge=0.01, le=400,
        description="The most one TCP connection carries, Gbit/s: 5 between EC2 instances outside a cluster "
        "placement group (EC2 User Guide, 'Amazon EC2 instance network bandwidth'). A single-connection mount "
        "near it with requests queueing is a ThroughputPlateau.",
    )
    instance_bandwidth_gbps: float | None = Field(
        default=None, ge=0.01, le=3200,
        description="The consumers' nodes' network bandwidth, Gbit/s (their instance type's): nconnect advice is "
        "ceil(min(this, the file-system limit) / perFlowCapGbps), with one more as headroom a choice, not a need.",
    )
    file_system_limit_gbps: float | None = Field(
        default=None, ge=0.01, le=3200,
        description="The server's throughput limit per client, Gbit/s. For EFS, when absent: 1,500 MiB/s per "
        "client in Elastic mode, 500 MiB/s otherwise (EFS User Guide, 'Amazon EFS performance specifications').",
    )


class CreditWatch(ApiModel):
    """Watch an EFS file system's burst credits and forecast when they run out."""

    file_system_id: str | None = Field(
        default=None, pattern=r"^fs-[0-9a-f]{8,40}$",
        description="The file system to watch; defaults to backend.parameters.fileSystemId.",
    )
    region: str | None = Field(default=None, description="AWS region; defaults to the operator's AWS_REGION.")
    interval_seconds: int = Field(default=300, ge=60, le=86400, description="How often to fetch CloudWatch metrics.")
    window_hours: int = Field(
        default=48,
        ge=1,
        le=336,
        description="Hours of history fetched and judged. 48 or more also compares whole days (the day-over-day "
        "change), which sees a nightly drain the day does not refill; below 48 only the newest hour's slope "
        "decides.",
    )


class StorageProfileSpec(ApiModel):
    """The mount contract of one consumer pattern."""

    backend: Backend = Field(description="The provisioner and parameters of the StorageClasses.")
    cache_policy: CachePolicy | None = Field(
        default=None,
        description="A named cache policy (mountwarden options presets, docs/reference/presets.md): strict "
        "(actimeo=0, lookupcache=none), staging (acregmin=0, acregmax=0, lookupcache=positive, cto: stat() never "
        "stale, for directories several clients write), cached (actimeo=600, lookupcache=all: others' changes up "
        "to 10 minutes late) or read-only (ro, actimeo=600, nocto, lookupcache=all). coherent is deprecated and "
        "means staging. None is for SQLite or trees of many small files: keep those on local storage.",
    )
    mount_options: list[str] = Field(
        default_factory=list, description="Options layered over the preset; an entry may hold several, comma-separated."
    )
    required_options: list[str] = Field(
        default_factory=list, description="Options every mount must have in effect, checked on the nodes (e.g. hard)."
    )
    forbidden_options: list[str] = Field(
        default_factory=list,
        description="Options no mount may have in effect (e.g. soft, nolock, actimeo=0; a bare name such as "
        "nconnect forbids any value).",
    )
    consumers: Consumers = Field(default_factory=Consumers, description="Which PVCs this profile governs.")
    enforcement: Enforcement = Field(
        default=Enforcement.WARN, description="warn: admission warnings only. deny: refuse PVCs that break the profile."
    )
    sqlite: SqlitePolicy = Field(
        default=SqlitePolicy.WARN,
        description="SQLite databases on these volumes: forbid (deny at admission with enforcement deny, error "
        "findings), warn, or allow.",
    )
    rollout: Rollout = Field(default_factory=Rollout, description="How option changes reach bound volumes.")
    credit_watch: CreditWatch | None = Field(
        default=None, description="EFS burst-credit forecasting; on by default for EFS backends with a fileSystemId."
    )
    throughput: Throughput = Field(
        default_factory=Throughput, description="The per-flow cap and bandwidths that throughput findings and "
        "nconnect advice are judged by.")
    remediation: Remediation = Field(
        default_factory=Remediation, description="What mountwarden may do by itself about a failure of these "
        "volumes: evict pods on a stale file handle (opt-in).")
    default: bool = Field(
        default=False, description="Make the newest StorageClass version the cluster's default class."
    )
    adopt: Adopt | None = Field(
        default=None,
        description="Take over existing classes and their bound volumes, without copying data. First only "
        "observed: status.adoption lists every volume it would take and how its mountOptions differ from this "
        "contract, status.rollout the plan (PVs patched, workloads restarted, in order). Then, as "
        "spec.rollout.approval allows (Manual: the annotation mountwarden.io/approve-rollout with the value "
        "status.adoption.approvalKey), its workloads are restarted one at a time, each one's PVs patched just "
        "before its restart (evictions, PodDisruptionBudgets), and every replica verified on its node; PVs no "
        "workload mounts are patched last; from then on this "
        "profile governs them. Claims keep their names; nothing is deleted or recreated. Needs "
        "spec.rollout.strategy: PatchBoundVolumes.",
    )

    def resolve(self) -> ResolvedPolicy:
        return resolve_policy(
            provisioner=self.backend.provisioner,
            cache_policy=self.cache_policy,
            mount_options=self.mount_options,
            required_options=self.required_options,
            forbidden_options=self.forbidden_options,
            kind=str(self.backend.kind) if self.backend.kind else None,
            sqlite=str(self.sqlite),
        )

    def watched_file_system(self) -> tuple[str, str] | None:
        """(file system id, region) whose burst credits this profile watches: creditWatch.fileSystemId, else an EFS
        backend's fileSystemId; the region "" is the operator's default (AWS_REGION). None: it watches none."""
        watch = self.credit_watch
        file_system_id = watch.file_system_id if watch else None
        if not file_system_id and self.backend.provisioner == EFS_PROVISIONER:
            file_system_id = self.backend.parameters.get("fileSystemId")
        return (str(file_system_id), (watch.region if watch else None) or "") if file_system_id else None

    def thresholds(self, throughput_mode: str | None = None) -> Thresholds:
        """When this profile's volumes' throughput is a finding; ``throughput_mode``: EFS's, once known."""
        limit, source = self.throughput.file_system_limit_gbps, "spec.throughput.fileSystemLimitGbps"
        if limit is None and backend_kind(self.backend.provisioner, self.backend.kind) == BackendKind.EFS:
            limit, source = efs_file_system_limit(throughput_mode)
        return Thresholds(per_flow_cap_gbps=self.throughput.per_flow_cap_gbps,
                          instance_bandwidth_gbps=self.throughput.instance_bandwidth_gbps,
                          file_system_limit_gbps=limit, file_system_limit_source=source)


class VersionRecord(ApiModel):
    version: int = Field(ge=1, description="The N of <profile>-vN.")
    storage_class_name: str = Field(description="The StorageClass of this version.")
    hash: str = Field(description="Hash of the StorageClass content (provisioner, parameters, options, ...).")
    mount_options: list[str] = Field(default_factory=list, description="The canonical mount options of this version.")
    created_at: datetime = Field(description="When this version's StorageClass was created.")
    superseded_by: str | None = Field(default=None, description="The StorageClass that replaced this one.")
    held_by: list[str] = Field(
        default_factory=list, description="PersistentVolumes that still use this version (they keep it alive)."
    )


class OpsBudgetStatus(ApiModel):
    writes_or_metadata: float = Field(description="Small writes or metadata operations per second the permitted "
                                                  "throughput allows (4 KiB each).")
    reads: float = Field(description="Small reads per second (reads are metered at a third).")


class MonthlyCosts(ApiModel):
    elastic: float | None = Field(default=None, description="US dollars a month in Elastic mode for the demand "
                                                             "that sized the advice (list prices of the region named).")
    provisioned: float | None = Field(default=None, description="US dollars a month for provisionedMibps, billed "
                                                                 "above the baseline the storage already earns.")


class DemandBasis(ApiModel):
    """The periods whose load sized the advice: unthrottled ones only (a throttled period's load is censored)."""

    periods: int = Field(description="How many periods.")
    period_seconds: int = Field(description="Seconds per period.")
    start: datetime = Field(description="The first of them.")
    end: datetime = Field(description="The last of them.")
    selection: str = Field(description="How they were chosen, e.g. balance above zero: not throttled.")
    average_bytes_per_second: float = Field(description="Their average metered rate.")
    peak_bytes_per_second: float = Field(description="Their highest metered rate.")
    peak_at_ceiling: bool = Field(default=False, description="The peak was at the permitted rate then too: "
                                                             "demand may be higher.")


class ThroughputRecommendation(ApiModel):
    mode: str = Field(description="bursting, provisioned or elastic.")
    reason: str = Field(description="Why this mode suits the observed load, the data it used and what it costs.")
    provisioned_mibps: int | None = Field(default=None, description="The Provisioned amount the demand justifies.")
    monthly_cost_usd: MonthlyCosts | None = Field(default=None, description="What each mode would cost.")
    basis: DemandBasis | None = Field(default=None, description="The demand that sized it; none when no period "
                                                                "of the window ran unthrottled.")


class ElasticEstimate(ApiModel):
    """What the window's load would be billed in Elastic mode (lower bounds: minimums applied to totals)."""

    billed_read_bytes: float = Field(description="Reads, each at least 32 KiB.")
    billed_write_bytes: float = Field(description="Writes, each at least 32 KiB.")
    billed_metadata_bytes: float = Field(description="Metadata requests, each at least 4 KiB.")
    window_seconds: float = Field(description="The history these bytes were counted over.")
    minimums_applied: bool = Field(description="Request counts (SampleCount) were known, so the minimums apply.")
    monthly_cost_usd: float | None = Field(default=None, description="Those bytes over a 730-hour month, in dollars.")
    prices: str = Field(description="The prices used: region, date read and source.")


class CreditConsumer(ApiModel):
    """One set of NFS counters on one node: a pod volume, or several pods sharing one superblock."""

    node: str = Field(description="The node.")
    pods: list[str] = Field(description="namespace/name of the pods using these counters.")
    volumes: list[str] = Field(description="Their PersistentVolumes.")
    profiles: list[str] = Field(description="The StorageProfiles of those volumes.")
    metered_bytes: float = Field(description="Bytes metered since the mount was made (estimate).")
    metered_bytes_per_second: float | None = Field(default=None, description="Metered bytes per second, averaged "
                                                                             "since the mount was made.")
    elastic_bytes_per_second: float | None = Field(default=None, description="The same requests billed as Elastic "
                                                                             "would bill them, per second.")
    read_bytes: float = Field(description="Bytes read.")
    write_bytes: float = Field(description="Bytes written.")
    metadata_ops: int = Field(description="Metadata requests (each metered at 4 KiB or more).")
    mounted_seconds: float | None = Field(default=None, description="Seconds since the mount was made.")


class ProfileConsumption(ApiModel):
    profile: str = Field(description="A StorageProfile on this file system.")
    metered_bytes_per_second: float = Field(description="Its consumers' estimated metered rate.")
    consumers: int = Field(description="How many consumers it has.")


class WorkloadCost(ApiModel):
    workload: str = Field(description="namespace/Kind/name of the controller (namespace/name for a bare pod).")
    metered_bytes_per_second: float = Field(description="Its estimated metered rate.")
    monthly_cost_usd: float | None = Field(default=None, description="Its share of the file system's throughput "
                                                                     "bill at the file system's mode (none in Bursting).")


class NamespaceCost(ApiModel):
    """One namespace's share of the file system: what its pods' requests are metered and billed."""

    namespace: str = Field(description="The namespace.")
    metered_bytes_per_second: float = Field(description="Its consumers' estimated metered rate.")
    share: float | None = Field(default=None, description="Its share of all consumers' metered bytes (0 to 1).")
    monthly_cost_usd: float | None = Field(default=None, description="Its share of the throughput bill at the file "
                                                                     "system's mode (costBasis); none in Bursting.")
    elastic_monthly_cost_usd: float | None = Field(default=None, description="What Elastic would bill its requests "
                                                                             "a month.")
    workloads: list[WorkloadCost] = Field(default_factory=list, description="Per workload, busiest first.")


class CrossAzVolume(ApiModel):
    """A pod volume whose EFS mount target is in another availability zone than its node (CrossAZMount)."""

    pod: str = Field(description="namespace/name of the pod.")
    node: str = Field(description="Its node.")
    node_zone: str = Field(description="The node's topology.kubernetes.io/zone.")
    volume: str = Field(description="The PersistentVolume.")
    profile: str = Field(description="The StorageProfile of its class.")
    mount_target_id: str = Field(description="The mount target it talks to (DescribeMountTargets).")
    mount_target_zone: str = Field(description="That mount target's zone.")
    address: str = Field(description="The mount target's address: addr= of the mount, or its TLS tunnel's peer.")
    local_mount_target_id: str | None = Field(default=None, description="The file system's mount target in the "
                                                                        "node's zone, if it has one.")
    bytes_per_second: float | None = Field(default=None, description="READ and WRITE payload a second since it was "
                                                                     "mounted (the node report's counters).")
    monthly_cost_usd: float | None = Field(default=None, description="Cross-zone transfer of those bytes a month "
                                                                     "at $0.01/GB (a lower bound).")


class CrossAzMounts(ApiModel):
    """The zone check of every pod volume on the file system (every profile watching it)."""

    judged: int = Field(description="Volumes whose mount target and node zone are both known.")
    volumes: list[CrossAzVolume] = Field(default_factory=list, description="Those that cross zones, busiest first.")
    monthly_cost_usd: float | None = Field(default=None, description="Their cross-zone transfer a month, together.")
    notes: list[str] = Field(default_factory=list, description="Why some volumes were not judged.")


class CreditConsumers(ApiModel):
    """Who drains the file system, from the node reports (every profile watching the same file system)."""

    namespaces: list[NamespaceCost] = Field(default_factory=list, description="Per namespace, busiest first: the "
                                            "cost of what each one's pods ask of the file system.")
    cost_basis: str | None = Field(default=None, description="How the namespaces' costs were priced.")
    estimated_metered_bytes_per_second: float = Field(description="All consumers together (estimate).")
    consumers: int = Field(description="Consumers found in the node reports.")
    by_profile: list[ProfileConsumption] = Field(default_factory=list, description="Per profile, busiest first.")
    top: list[CreditConsumer] = Field(default_factory=list, description="The busiest consumers, busiest first.")
    newest_report: datetime | None = Field(default=None, description="The newest node report read.")
    notes: list[str] = Field(default_factory=list, description="How the figures were estimated and what they miss.")


class CreditsStatus(ApiModel):
    """The burst-credit forecast of the profile's EFS file system (see credits forecast)."""

    file_system_id: str = Field(description="The file system watched.")
    state: str = Field(description="Healthy, Draining, Empty, Trap or Unknown.")
    throughput_mode: str | None = Field(default=None, description="bursting, provisioned or elastic.")
    performance_mode: str | None = Field(default=None, description="generalPurpose or maxIO (DescribeFileSystems): "
                                                                   "Max I/O has higher per-operation latency and "
                                                                   "cannot use Elastic throughput.")
    size_gib: float | None = Field(default=None, description="Size of the Standard class data, GiB.")
    balance_bytes: float | None = Field(default=None, description="Latest BurstCreditBalance, bytes.")
    slope_bytes_per_second: float | None = Field(default=None, description="Robust slope of the balance over "
                                                                           "the trend window (the newest hour).")
    net_change_per_day_bytes: float | None = Field(
        default=None, description="Mean balance of the last 24 h minus that of the 24 h before (needs "
        "windowHours of 48 or more)."
    )
    time_to_empty_seconds: float | None = Field(default=None, description="When the balance will be empty; none "
                                                                          "when not draining.")
    time_to_empty_basis: str | None = Field(
        default=None, description="What the time to empty was projected from: slope, day-over-day or same time "
        "yesterday."
    )
    history_seconds: float | None = Field(default=None, description="The history the forecast had.")
    permitted_bytes_per_second: float | None = Field(default=None, description="PermittedThroughput now.")
    metered_bytes_per_second: float | None = Field(default=None, description="MeteredIOBytes per second now.")
    percent_io_limit: float | None = Field(default=None, description="PercentIOLimit now (General Purpose mode).")
    metadata_share: float | None = Field(default=None, description="Share of metered bytes spent on metadata.")
    ops_budget_per_second: OpsBudgetStatus | None = Field(default=None, description="Small operations per "
                                                                                     "second the permitted rate allows.")
    elastic_estimate: ElasticEstimate | None = Field(default=None, description="What the load would cost in "
                                                                               "Elastic mode.")
    recommendation: ThroughputRecommendation | None = Field(default=None, description="Throughput mode to use.")
    cross_az_mounts: CrossAzMounts | None = Field(default=None, description="Pod volumes talking to a mount "
                                                  "target in another zone than their node (CrossAZMount).")
    consumers: CreditConsumers | None = Field(default=None, description="Who drains the file system (node "
                                                                        "reports).")
    message: str = Field(default="", description="The forecast in one line, or what stops it.")
    checked_at: datetime | None = Field(default=None, description="When the metrics were last fetched.")


class RolloutWorkload(ApiModel):
    """One workload of a rollout and where it stands."""

    kind: str = Field(description="Deployment, StatefulSet or DaemonSet.")
    namespace: str = Field(description="Its namespace.")
    name: str = Field(description="Its name.")
    state: RolloutWorkloadState = Field(description="Pending, Restarting, Verifying, Done, Blocked or Waiting.")
    reason: str = Field(
        description="Why, in one CamelCase word: Queued, RollingOut, Remounting, Verified, WaitingForReplicas, "
        "SuperblockShared, OptionsAbsent, ReportMissing, ReportStale, MountNotReported, RemountsExhausted, "
        "DisruptionBudget, ScaledToZero, ScalingDisabled, AwaitingApproval or Paused."
    )
    message: str = Field(description="What it waits for or what went wrong: the pod, the node and the cause.")
    replicas: int = Field(description="Its desired replicas (for a DaemonSet, the nodes it should run on).")
    volumes: list[str] = Field(default_factory=list, description="The profile's PersistentVolumes it mounts.")
    pod: str | None = Field(default=None, description="The replica the reason is about.")
    node: str | None = Field(default=None, description="The node of that replica.")
    restarted_at: datetime | None = Field(
        default=None, description="When mountwarden restarted it (its pod template's mountwarden.io/restarted-at)."
    )
    verifying_since: datetime | None = Field(
        default=None, description="Since when the node reports are awaited (verifyTimeoutSeconds counts from here)."
    )
    done_at: datetime | None = Field(default=None, description="When every replica was verified.")
    remounts: int | None = Field(
        default=None, description="Replicas evicted so that they mount afresh: they had kept an old superblock."
    )


class RolloutConsumer(ApiModel):
    """A consumer mountwarden does not restart: on an older version, a Job, or a bare pod."""

    kind: str = Field(description="Deployment, StatefulSet, DaemonSet, Job, CronJob, ReplicaSet or Pod.")
    namespace: str = Field(description="Its namespace.")
    name: str = Field(description="Its name.")
    volumes: list[str] = Field(default_factory=list, description="The profile's PersistentVolumes it mounts.")
    storage_class_names: list[str] = Field(default_factory=list, description="The classes of those volumes.")
    note: str = Field(description="What happens to it, or what to do.")


class FreshnessLoss(ApiModel):
    """A consumer whose volumes lose freshness with the rollout's change of options."""

    kind: str = Field(description="Deployment, StatefulSet, DaemonSet, Job, CronJob or Pod.")
    namespace: str = Field(description="Its namespace.")
    name: str = Field(description="Its name.")
    pods: list[str] = Field(default_factory=list, description="Its pods now.")
    volumes: list[str] = Field(default_factory=list, description="Its PersistentVolumes of the profile.")
    loses: str = Field(description="What gets staler, and how much: stat() by path, names another client creates.")


class RolloutStatus(ApiModel):
    """How the current version reaches volumes that were bound before it (spec.rollout)."""

    phase: RolloutPhase = Field(
        description="AwaitingApproval, Progressing, Paused (a workload is Blocked), Waiting (only workloads at "
        "zero replicas are left), AwaitingMigration (NewStorageClass) or Complete."
    )
    strategy: RolloutStrategy = Field(description="The strategy this plan follows.")
    target_version: int = Field(description="The version the rollout brings the volumes to.")
    target_storage_class_name: str = Field(description="The StorageClass of that version.")
    from_versions: list[int] = Field(default_factory=list, description="The versions the volumes came from.")
    message: str = Field(description="Where the rollout stands, in one line.")
    supersedes: str | None = Field(
        default=None, description="The target of an unfinished rollout this one replaced."
    )
    started_at: datetime = Field(description="When this plan was first made.")
    completed_at: datetime | None = Field(default=None, description="When every workload was verified.")
    volumes: list[str] = Field(
        default_factory=list,
        description="The PersistentVolumes the plan covers: the lineage's (PatchBoundVolumes) or those on older "
        "versions (NewStorageClass).",
    )
    volumes_patched: int = Field(default=0, description="How many of them carry the target's mountOptions.")
    workloads: list[RolloutWorkload] = Field(
        default_factory=list, description="The workloads mountwarden restarts, in the order it restarts them."
    )
    consumers_on_older_versions: list[RolloutConsumer] = Field(
        default_factory=list,
        description="Consumers still on older options that mountwarden does not restart: every consumer under "
        f"NewStorageClass; Jobs, CronJobs and bare pods under PatchBoundVolumes. The first {LISTED_CONSUMERS}; the "
        "count says how many in all (`mountwarden plan` lists them all).",
    )
    consumers_on_older_versions_count: int = Field(
        default=0, description=f"How many consumers are on older options in all (the list names the first "
        f"{LISTED_CONSUMERS}: etcd refuses a write of more than 1.5 MiB).",
    )
    freshness_loss: list[FreshnessLoss] = Field(
        default_factory=list,
        description="The consumers whose volumes the new options make staler (a longer attribute cache, negative "
        f"lookups cached), and by how much: shown before anything moves, while approval is awaited. The first "
        f"{LISTED_CONSUMERS}; the count says how many in all (`mountwarden plan` lists them all).",
    )
    freshness_loss_count: int = Field(
        default=0, description=f"How many consumers lose freshness in all (the list names the first "
        f"{LISTED_CONSUMERS}: etcd refuses a write of more than 1.5 MiB).",
    )
    guidance: str | None = Field(default=None, description="How to migrate consumers to the new class.")


class AdoptionDifference(ApiModel):
    option: str = Field(description="The option, as a mount names it.")
    contract: str = Field(description="What this profile's contract has.")
    volume: str = Field(description="What the PersistentVolume's mountOptions have (the kernel default when absent).")


class AdoptedVolume(ApiModel):
    """A PersistentVolume spec.adopt takes over."""

    name: str = Field(description="The PersistentVolume.")
    storage_class_name: str = Field(default="", description="Its class (it keeps it).")
    claim: str | None = Field(default=None, description="namespace/name of its claim (it keeps it).")
    mount_options: list[str] = Field(default_factory=list, description="Its spec.mountOptions now.")
    state: str = Field(description="Pending (not adopted yet) or Adopted (mountwarden.io/adopted-by on the PV).")
    action: str = Field(description="What the approved plan does to it: adopt (patch its mountOptions and annotate "
                                    "it), patch, or keep.")
    differences: list[AdoptionDifference] = Field(
        default_factory=list, description="How its mountOptions differ from the contract, option by option.")


class AdoptionRefusal(ApiModel):
    field: str = Field(description="The field of the spec that names what is refused.")
    reason: str = Field(description="ClassGoverned, ClassAdopted, ProvisionerDiffers, NotNetworkStorage, "
                                    "VolumeGoverned, VolumeAdopted or StrategyNewStorageClass.")
    message: str = Field(description="What is refused, and why.")


class AdoptionStatus(ApiModel):
    """What spec.adopt takes over, and where that stands."""

    phase: AdoptionPhase = Field(description="NothingToAdopt, Refused, AwaitingApproval, Adopting or Adopted.")
    message: str = Field(description="Where the adoption stands, in one line, with the command that approves it.")
    approval_key: str | None = Field(
        default=None, description="The value of mountwarden.io/approve-rollout that approves the plan (with "
        "approval Manual): the version and, while volumes wait to be adopted, a digest of which.")
    storage_class_names: list[str] = Field(default_factory=list, description="The classes taken over.")
    volumes: list[AdoptedVolume] = Field(default_factory=list, description="Every volume taken over, by name.")
    workloads: list[str] = Field(
        default_factory=list, description="Kind/namespace/name of the workloads restarted for it, in the order the "
        "rollout restarts them (status.rollout.workloads has where each stands).")
    refused: list[AdoptionRefusal] = Field(default_factory=list, description="What spec.adopt names and cannot "
                                                                           "take, each naming its field (the first "
                                                                           "20).")


class ComplianceCounts(ApiModel):
    compliant: int = Field(default=0, description="Mounted as declared, confirmed by the node's report.")
    drifted: int = Field(default=0, description="Mounted with other options (or SQLite against the policy).")
    unknown: int = Field(default=0, description="Not confirmed: no report, a stale report, or not mounted yet.")


class Offender(ApiModel):
    pod: str = Field(description="namespace/name of the pod.")
    node: str = Field(description="The node it runs on.")
    volume: str = Field(description="The PersistentVolume.")
    reason: str = Field(description="OptionMismatch, SuperblockShared, NconnectIgnored, SQLiteOnNFS, ReportMissing, "
                                    "ReportStale, NotMounted or NotScheduled.")
    message: str = Field(description="What differs, on which node, and why.")


class ComplianceStatus(ApiModel):
    """Whether every pod using the profile's volumes really mounts them as declared (node reports)."""

    volumes: ComplianceCounts = Field(description="Pod volumes (one pod using one PV) by verdict.")
    pods: ComplianceCounts = Field(description="Pods by their worst volume's verdict.")
    sqlite_databases: int = Field(default=0, description="SQLite databases in use on the profile's volumes.")
    worst_offenders: list[Offender] = Field(default_factory=list, description="The worst pod volumes, worst first.")
    checked_at: datetime | None = Field(default=None, description="When the reports were last compared.")


class ServerLoad(ApiModel):
    server: str = Field(max_length=SERVER_NAME_MAX, description="The server (address or host name) of the mounts "
                        f"(cut to {SERVER_NAME_MAX} characters).")
    mounts: int = Field(description="Pod volumes of this profile mounted from it.")
    nodes: int = Field(description="Nodes they are on.")
    read_bytes_per_second: float = Field(description="Bytes read from it per second, all those mounts together.")
    write_bytes_per_second: float = Field(description="Bytes written to it per second, all together.")
    message: str = Field(default="", description="What the load means for this backend kind.")


class StorageProfileStatus(ApiModel):
    storage_class_name: str | None = Field(default=None, description="The current StorageClass version.")
    version: int | None = Field(default=None, description="The current version number.")
    options_hash: str | None = Field(default=None, description="Hash of the current StorageClass content.")
    effective_mount_options: list[str] = Field(
        default_factory=list, description="The canonical options new volumes of this profile are mounted with."
    )
    servers: list[ServerLoad] = Field(
        default_factory=list, max_length=SERVERS_MAX,
        description="The servers (the busiest 32) the profile's volumes are mounted from: mounts, nodes and bytes "
        "per second across the cluster (node reports). A gateway that is one node's network interface is a funnel.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What the spec asks for that will not do what it says, or is deprecated (a deprecated "
        "cachePolicy, an rsize the kernel rounds), each naming the field and the fix.",
    )
    history: list[VersionRecord] = Field(default_factory=list, description="Versions that exist, oldest first.")
    credits: CreditsStatus | None = Field(default=None, description="EFS burst-credit forecast (credit watch).")
    compliance: ComplianceStatus | None = Field(default=None, description="What the node reports confirm.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Compliant and CreditsDraining, Kubernetes-style."
    )
    observed_generation: int | None = Field(default=None, description="The spec generation last reconciled.")
    rollout: RolloutStatus | None = Field(
        default=None, description="How the current version reaches volumes bound before it (spec.rollout)."
    )
    adoption: AdoptionStatus | None = Field(
        default=None, description="What spec.adopt takes over, how each volume differs, and where it stands."
    )


def contract_of(spec: StorageProfileSpec, policy: ResolvedPolicy, status: Mapping | None) -> Contract:
    """A valid profile's contract, as compliance judges its volumes by."""
    return Contract(policy.options, tuple(spec.required_options), tuple(spec.forbidden_options), str(spec.sqlite),
                    spec.thresholds(ProfileStatus(status).throughput_mode),
                    backend_kind(spec.backend.provisioner, spec.backend.kind))


def adopter_of(name: str, spec: StorageProfileSpec, created_at: str | None, status: Mapping | None = None) -> Adopter:
    """What a profile's spec.adopt takes over, as mountwarden.core.adoption judges it (and what it last listed)."""
    adopt = spec.adopt or Adopt()
    listed = frozenset(volume["name"] for volume in (ProfileStatus(status).adoption or {}).get("volumes") or [])
    return Adopter(
        profile=name, storage_class_names=tuple(adopt.storage_class_names),
        volume_selector=adopt.volume_selector.to_wire() if adopt.volume_selector is not None else None,
        provisioner=spec.backend.provisioner,
        patches_volumes=spec.rollout.strategy == RolloutStrategy.PATCH_BOUND_VOLUMES,
        created_at=created_at or "",
        listed=listed,
    )


def desired_class(spec: StorageProfileSpec, policy: ResolvedPolicy) -> DesiredClass:
    """The StorageClass content a valid spec asks for."""
    backend = spec.backend
    return DesiredClass(
        provisioner=backend.provisioner,
        parameters=dict(backend.parameters),
        reclaim_policy=str(backend.reclaim_policy),
        volume_binding_mode=str(backend.volume_binding_mode),
        allow_volume_expansion=backend.allow_volume_expansion,
        mount_options=tuple(policy.mount_options),
    )


class ProfileStatus:
    """A StorageProfile's status as stored, read by name: the handlers never spell its wire fields themselves.

    A view, not a validation: status is the operator's own writing, read on hot paths (indexes, timers).
    """

    def __init__(self, status: Mapping | None) -> None:
        self._status = status or {}

    @property
    def storage_class_name(self) -> str | None:
        return self._status.get("storageClassName")

    @property
    def version(self) -> int | None:
        version = self._status.get("version")
        return int(version) if version is not None else None

    @property
    def observed_generation(self) -> int | None:
        return self._status.get("observedGeneration")

    @property
    def effective_mount_options(self) -> tuple[str, ...]:
        return tuple(self._status.get("effectiveMountOptions") or ())

    @property
    def history(self) -> list[Mapping]:
        """The version records (VersionRecord's wire form), oldest first."""
        return list(self._status.get("history") or [])

    @property
    def last_version(self) -> int:
        """The highest version the profile ever had (status.version and status.history): the next one is above it."""
        return max([self.version or 0, *(int(record["version"]) for record in self.history)])

    @property
    def throughput_mode(self) -> str | None:
        """The EFS throughput mode, once the credit watch has read it."""
        return (self._status.get("credits") or {}).get("throughputMode")

    @property
    def rollout(self) -> Mapping | None:
        """status.rollout as the rollout wrote it (mountwarden.core.rollout.status)."""
        return self._status.get("rollout")

    @property
    def rollout_phase(self) -> str | None:
        return (self.rollout or {}).get("phase")

    @property
    def adoption(self) -> Mapping | None:
        """status.adoption as the rollout wrote it (mountwarden.handlers.rollouts)."""
        return self._status.get("adoption")
