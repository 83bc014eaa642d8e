"""Rolling a profile's new options out to volumes that are already bound, one workload at a time.

A StorageClass's options apply only when a volume is provisioned, and a bound
PV's ``mountOptions`` apply only at the next mount. So a new version of a
profile reaches running consumers in three steps, one workload at a time
(strategy PatchBoundVolumes): at its turn patch its PVs, restart it the way
``kubectl rollout restart`` does, and prove on the nodes that every replica really
mounted the new options. PVs no restartable workload mounts are patched last.

Everything here is pure. One module per stage, each importing only those above it:

- ``world``: the target and the cluster's objects, parsed from their wire form;
- ``plan``: volumes -> claims -> pods -> the workloads that must remount (the dry run);
- ``actions``: the patches, restarts and evictions a tick asks for, and its Events;
- ``verify``: each replica's mounts against the target, on its node's report;
- ``machine``: the state machine, as tables (docs/reference/rollout.md is generated from them);
- ``status``: status.rollout written (and read back by ``needs_world``);
- ``tick``: ``advance``, one tick: the machine judges, the status records.
"""

from mountwarden.core.node.report import NodeReport, ReportedMount
from mountwarden.core.rollout.actions import (
    Action,
    Event,
    PatchVolume,
    ReleaseVolume,
    RemountPod,
    RestartWorkload,
    Step,
)
from mountwarden.core.rollout.machine import DISRUPTION_BUDGET, IN_FLIGHT, Phase, State
from mountwarden.core.rollout.plan import Consumer, Plan, VolumeChange, adopting, build_plan
from mountwarden.core.rollout.status import needs_world
from mountwarden.core.rollout.tick import LISTED_CONSUMERS, advance
from mountwarden.core.rollout.verify import Check, PodCheck, verify_pod
from mountwarden.core.rollout.world import (
    APPLIED_VERSION_ANNOTATION,
    APPROVE_ANNOTATION,
    PREVIOUS_OPTIONS_ANNOTATION,
    RESTARTED_AT_ANNOTATION,
    RESTARTED_FOR_ANNOTATION,
    Autoscaler,
    DisruptionBudget,
    Pod,
    Policy,
    Target,
    Version,
    Volume,
    Workload,
    WorkloadRef,
    World,
    controller_of,
    parse_time,
    rollout_progress,
    timestamp,
)

__all__ = [
    "APPLIED_VERSION_ANNOTATION", "APPROVE_ANNOTATION", "DISRUPTION_BUDGET", "IN_FLIGHT", "LISTED_CONSUMERS",
    "PREVIOUS_OPTIONS_ANNOTATION", "RESTARTED_AT_ANNOTATION", "RESTARTED_FOR_ANNOTATION",
    "Action", "Autoscaler", "Check", "DisruptionBudget", "Consumer", "Event", "NodeReport", "PatchVolume", "Phase", "Plan",
    "Pod", "PodCheck", "Policy", "ReleaseVolume", "RemountPod", "ReportedMount", "RestartWorkload", "State", "Step", "Target", "Version", "Volume",
    "VolumeChange", "Workload", "WorkloadRef", "World", "adopting", "advance", "build_plan", "controller_of", "needs_world",
    "parse_time", "rollout_progress", "timestamp", "verify_pod",
]
