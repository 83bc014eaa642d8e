"""The rollout planner (mountwarden.core.rollout): every transition of a workload and of the rollout.

The world: profile p goes from v1 (coherent) to v2 (cached); workloads live in namespace shop; a
Deployment <w> mounts claim <w>, bound to PV pv-<w>, through pods <w>-<i> of ReplicaSet <w>-rs.
"""

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mountwarden.api.storageprofile import RolloutStatus
from mountwarden.core.rollout import (
    LISTED_CONSUMERS,
    Autoscaler,
    DisruptionBudget,
    NodeReport,
    PatchVolume,
    Pod,
    Policy,
    RemountPod,
    ReportedMount,
    RestartWorkload,
    Target,
    Version,
    Volume,
    Workload,
    WorkloadRef,
    World,
    advance,
    build_plan,
    needs_world,
    timestamp,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=5)
COHERENT = ("vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
            "acregmax=3", "lookupcache=positive", "cto")
CACHED = ("vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
          "acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600", "lookupcache=all")
#: What a driver that drops options mounts: neither v1's nor v2's options.
DROPPED = ("vers=4.1", "hard", "lookupcache=none")
V1 = Version("p-v1", 1, COHERENT)
V2 = Version("p-v2", 2, CACHED)
AUTOMATIC = Policy(approval="Automatic")
NS = "shop"


# -- builders ----------------------------------------------------------------------------------


def target(policy: Policy = AUTOMATIC, approved: str | None = None) -> Target:
    return Target("p", V2, (V1, V2), policy, approved)


def volume(name: str, options=COHERENT, storage_class: str = "p-v1", **fields) -> Volume:
    return Volume(f"pv-{name}", storage_class, tuple(options), (NS, name), **fields)


def patched(name: str) -> Volume:
    return volume(name, CACHED, applied_version="p-v2", previous_options=COHERENT)


def deployment(name: str, replicas: int = 2, restarted: bool = False, progress: str = "",
               kind: str = "Deployment") -> Workload:
    return Workload(WorkloadRef(kind, NS, name), replicas, resource_version="42",
                    restarted_for="p-v2" if restarted else None,
                    restarted_at=timestamp(EARLIER) if restarted else None,
                    claims=(name,), progress=progress)


def pod(workload: str, index: int, node: str = "n1", *, ready: bool = True, terminating: bool = False,
        started: datetime | None = EARLIER, owner: WorkloadRef | None = None) -> Pod:
    owner = owner if owner is not None else WorkloadRef("ReplicaSet", NS, f"{workload}-rs")
    return Pod(NS, f"{workload}-{index}", f"uid-{workload}-{index}", node, "Running", ready, terminating, started,
               {workload: "data"}, owner, {"app": workload})


def point(p: Pod) -> str:
    return f"/var/lib/kubelet/pods/{p.uid}/volumes/kubernetes.io~nfs/pv-{p.name.rsplit('-', 1)[0]}"


def mount(p: Pod, options=CACHED, superblock: str | None = None, shared_with=()) -> ReportedMount:
    return ReportedMount(p.uid, f"pv-{p.name.rsplit('-', 1)[0]}", point(p), superblock or f"sb-{p.uid}",
                 tuple(options), tuple(shared_with))


def report(node: str, *mounts: ReportedMount, scanned: datetime = NOW) -> NodeReport:
    return NodeReport(node, scanned, tuple(mounts))


def world(volumes=(), pods=(), workloads=(), reports=(), autoscalers=(), parents=None, budgets=()) -> World:
    if parents is None:
        parents = {WorkloadRef("ReplicaSet", NS, f"{w.ref.name}-rs"): w.ref for w in workloads}
    return World(tuple(volumes), tuple(pods), tuple(workloads), parents, tuple(autoscalers),
                 {r.node: r for r in reports}, tuple(budgets))


def budget(name: str, app: str = "a", allowed: int = 0, observed: bool = True) -> DisruptionBudget:
    return DisruptionBudget(NS, name, {"matchLabels": {"app": app}}, allowed, desired_healthy=2, current_healthy=2,
                            observed=observed)


def step(w: World, previous: dict | None = None, t: Target | None = None, now: datetime = NOW):
    return advance(build_plan(t or target(), w), previous, now)


def line(result, name: str = "a") -> dict:
    return next(w for w in result.status["workloads"] if w["name"] == name)


def rolled_out(name: str = "a", replicas: int = 2, options=CACHED, node: str = "n1"):
    """A restarted workload whose rollout is complete, its replicas mounting ``options``."""
    pods = [pod(name, i, node) for i in range(replicas)]
    return deployment(name, replicas, restarted=True), pods, report(node, *(mount(p, options) for p in pods))


def previous_with(*lines: dict, **fields) -> dict:
    return {"phase": "Progressing", "strategy": "PatchBoundVolumes", "targetStorageClassName": "p-v2",
            "targetVersion": 2, "startedAt": timestamp(EARLIER), "workloads": list(lines), **fields}


def was(name: str, state: str, **fields) -> dict:
    return {"kind": "Deployment", "namespace": NS, "name": name, "state": state, "reason": "", "message": "",
            "replicas": 2, **fields}


# -- approval ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("approval", "annotation", "proceeds"), [
    ("Manual", None, False),
    ("Manual", "1", False),  # an approval of another version approves nothing
    ("Manual", "2", True),
    ("Automatic", None, True),
])
def test_manual_approval_waits_for_the_annotation_of_the_target_version(approval, annotation, proceeds):
    w = world([volume("a")], [pod("a", 0), pod("a", 1)], [deployment("a")])
    result = step(w, t=target(Policy(approval=approval), annotation))
    assert bool(result.actions) is proceeds
    if not proceeds:
        assert result.status["phase"] == "AwaitingApproval"
        assert (line(result)["state"], line(result)["reason"]) == ("Pending", "AwaitingApproval")
        assert "kubectl annotate storageprofile p mountwarden.io/approve-rollout=2" in result.status["message"]


def test_who_loses_freshness_is_named_in_the_plan_and_before_approval_in_status():
    # v1 (coherent: acregmax=3, lookupcache=positive) to v2 (cached: 600 s, negative lookups cached).
    w = world([volume("a")], [pod("a", 0), pod("a", 1)], [deployment("a")])
    plan = build_plan(target(Policy(approval="Manual")), w)
    expected = ("stat() by path up to 600 s stale instead of 3 s; a file another client creates missing for up to "
                "600 s instead of seen at once (nfs(5); kernel lab)")
    assert plan.to_dict()["freshnessLoss"] == [{"kind": "Deployment", "namespace": NS, "name": "a",
                                                "pods": ["a-0", "a-1"], "volumes": ["pv-a"], "loses": expected}]
    assert any(w.startswith(f"Deployment/{NS}/a loses freshness: {expected}") for w in plan.warnings), plan.warnings
    result = step(w, t=target(Policy(approval="Manual")))
    assert result.status["phase"] == "AwaitingApproval" and not result.actions
    assert [loss["loses"] for loss in result.status["freshnessLoss"]] == [expected]
    RolloutStatus.model_validate(result.status)  # the CRD's shape


def test_a_change_that_makes_nothing_staler_names_no_one():
    w = world([volume("a", options=CACHED)], [pod("a", 0)], [deployment("a")])
    back = Target("p", V1, (V2, V1), AUTOMATIC)
    assert build_plan(back, w).freshness_lost == []


# -- one workload, transition by transition ---------------------------------------------------


def test_pending_workload_starts_after_its_volumes_are_patched():
    w = world([volume("a")], [pod("a", 0), pod("a", 1)], [deployment("a")])
    result = step(w)
    assert result.actions == (
        PatchVolume("pv-a", CACHED, COHERENT, "p-v2"),
        RestartWorkload(WorkloadRef("Deployment", NS, "a"), "42", "p-v2", timestamp(NOW)),
    )
    assert (line(result)["state"], line(result)["reason"], line(result)["restartedAt"]) == (
        "Restarting", "RollingOut", timestamp(NOW))
    assert result.status["phase"] == "Progressing" and result.status["volumesPatched"] == 1


def test_a_patched_volume_is_not_patched_again():
    w = world([patched("a")], [pod("a", 0), pod("a", 1)], [deployment("a")])
    assert not any(isinstance(action, PatchVolume) for action in step(w).actions)


def test_a_restarted_workload_is_never_restarted_again_even_without_status():
    """The template's restarted-for is the record: a planner that lost its status restarts nothing."""
    w = world([patched("a")], [pod("a", 0)], [deployment("a", restarted=True, progress="1 of 2 replicas updated")])
    result = step(w, previous=None)
    assert result.actions == ()
    assert (line(result)["state"], line(result)["reason"]) == ("Restarting", "RollingOut")
    assert "1 of 2 replicas updated" in line(result)["message"]


def test_rolled_out_but_replicas_not_ready_keeps_verifying():
    workload, pods, node = rolled_out()
    pods[1] = replace(pods[1], ready=False)
    result = step(world([patched("a")], pods, [workload], [node]))
    assert (line(result)["state"], line(result)["reason"]) == ("Verifying", "WaitingForReplicas")
    assert line(result)["verifyingSince"] == timestamp(NOW)


def test_every_replica_with_the_new_options_makes_it_done():
    workload, pods, node = rolled_out()
    result = step(world([patched("a")], pods, [workload], [node]))
    assert (line(result)["state"], line(result)["reason"], line(result)["doneAt"]) == (
        "Done", "Verified", timestamp(NOW))
    assert result.status["phase"] == "Complete" and result.status["completedAt"] == timestamp(NOW)


def test_terminating_replicas_are_not_verified():
    workload, pods, node = rolled_out()
    old = replace(pod("a", 9), terminating=True)
    result = step(world([patched("a")], [*pods, old], [workload], [node]))
    assert line(result)["state"] == "Done"


@pytest.mark.parametrize(("reports", "reason"), [
    ([], "ReportMissing"),
    ([report("n1", scanned=EARLIER - timedelta(seconds=1))], "ReportStale"),
    ([report("n1")], "MountNotReported"),
])
def test_no_verdict_yet_keeps_verifying_with_the_reason(reports, reason):
    workload, pods, _ = rolled_out()
    result = step(world([patched("a")], pods, [workload], reports))
    assert (line(result)["state"], line(result)["reason"]) == ("Verifying", reason)
    assert (line(result)["pod"], line(result)["node"]) == ("a-0", "n1")
    assert "pod shop/a-0 on node n1" in line(result)["message"]


def test_no_verdict_within_the_verify_timeout_blocks():
    workload, pods, _ = rolled_out()
    w = world([patched("a")], pods, [workload], [])
    since = timestamp(NOW - timedelta(seconds=600))
    result = step(w, previous_with(was("a", "Verifying", verifyingSince=since)))
    assert (line(result)["state"], line(result)["reason"]) == ("Blocked", "ReportMissing")
    assert "no verdict after 600s" in line(result)["message"] and "agent running" in line(result)["message"]
    assert result.status["phase"] == "Paused"
    # One second earlier it still waits, and the clock is the one kept in status.
    result = step(w, previous_with(was("a", "Verifying", verifyingSince=since)), now=NOW - timedelta(seconds=1))
    assert line(result)["state"] == "Verifying" and line(result)["verifyingSince"] == since


def test_a_replica_that_kept_an_old_superblock_alone_is_remounted():
    workload, pods, _ = rolled_out()
    node = report("n1", mount(pods[0]), mount(pods[1], COHERENT))
    result = step(world([patched("a")], pods, [workload], [node]))
    assert result.actions == (RemountPod(NS, "a-1", "uid-a-1"),)
    assert (line(result)["state"], line(result)["reason"], line(result)["pod"]) == ("Restarting", "Remounting", "a-1")
    assert line(result)["remounts"] == 1 and "verifyingSince" not in line(result)


def test_replicas_sharing_an_old_superblock_among_themselves_are_evicted_one_at_a_time_oldest_first():
    workload, _, _ = rolled_out()
    pods = [pod("a", 0, started=NOW - timedelta(minutes=1)), pod("a", 1, started=EARLIER)]
    node = report("n1", mount(pods[0], COHERENT, "0:60", [point(pods[1])]),
                  mount(pods[1], COHERENT, "0:60", [point(pods[0])]))
    result = step(world([patched("a")], pods, [workload], [node]))
    assert result.actions == (RemountPod(NS, "a-1", "uid-a-1"),)
    assert (line(result)["state"], line(result)["reason"], line(result)["pod"]) == ("Restarting", "Remounting", "a-1")
    assert line(result)["remounts"] == 1 and "1 more replica(s) after its replacement is Ready" in line(result)["message"]
    assert [e.message for e in result.events if e.reason == "RemountingPod"] == [
        "evicting pod shop/a-1 so that it mounts afresh"]


def test_an_old_replica_a_pod_list_still_shows_live_is_waited_for_not_evicted():
    """The pods were listed before the controller marked the old replica for deletion: it still looks live, with
    the old options, beside a rolled-out workload. Evicting it would count a remount that nothing needed."""
    workload, pods, _ = rolled_out()
    old = pod("a", 9, started=EARLIER - timedelta(minutes=5))
    node = report("n1", *(mount(p) for p in pods), mount(old, COHERENT))
    result = step(world([patched("a")], [*pods, old], [workload], [node]))
    assert result.actions == ()
    assert (line(result)["state"], line(result)["reason"]) == ("Verifying", "WaitingForReplicas")
    assert line(result)["message"] == ("3 replicas live, 2 desired: the pods were read before an old replica "
                                       "stopped") and "remounts" not in line(result)
    # The next read shows it terminating: verified, with no remount.
    result = step(world([patched("a")], [*pods, replace(old, terminating=True)], [workload], [node]),
                  previous_with(line(result)))
    assert (line(result)["state"], line(result)["reason"], line(result).get("remounts")) == ("Done", "Verified", None)


def test_the_next_stale_replica_waits_until_the_evicted_ones_replacement_is_ready():
    workload, _, _ = rolled_out()
    kept, replacement = pod("a", 0), pod("a", 2, ready=False, started=NOW)
    node = report("n1", mount(kept, COHERENT, "0:60"), mount(replacement))
    before = was("a", "Restarting", reason="Remounting", pod="a-1", node="n1", remounts=1)
    result = step(world([patched("a")], [kept, replacement], [workload], [node]), previous_with(before))
    assert result.actions == ()
    assert (line(result)["state"], line(result)["reason"]) == ("Verifying", "WaitingForReplicas")
    # Ready now: the next one goes.
    ready_now = replace(replacement, ready=True)
    result = step(world([patched("a")], [kept, ready_now], [workload], [node]), previous_with(before))
    assert result.actions == (RemountPod(NS, "a-0", "uid-a-0"),) and line(result)["remounts"] == 2


def test_a_budget_that_allows_no_disruption_leaves_the_workload_waiting_with_the_budget_named():
    workload, pods, _ = rolled_out()
    node = report("n1", mount(pods[0]), mount(pods[1], COHERENT))
    b_pods = [pod("b", 0), pod("b", 1)]
    result = step(world([patched("a"), patched("b")], [*pods, *b_pods], [workload, deployment("b")], [node],
                        budgets=[budget("a-pdb")]))
    assert result.actions == ()
    assert (line(result)["state"], line(result)["reason"], line(result)["pod"]) == ("Waiting", "DisruptionBudget", "a-1")
    assert "PodDisruptionBudget shop/a-pdb refuses to let pod shop/a-1 be evicted" in line(result)["message"]
    assert "2 healthy, 2 needed" in line(result)["message"]
    # It keeps its slot: the next workload is not started meanwhile.
    assert (line(result, "b")["state"], line(result, "b")["reason"]) == ("Pending", "Queued")
    assert not any(isinstance(action, RestartWorkload) for action in result.actions)
    assert result.status["phase"] == "Waiting" and "PodDisruptionBudget shop/a-pdb" in result.status["message"]
    assert [(e.warning, e.reason) for e in result.events if e.warning] == [(True, "DisruptionBudget")]
    # Once the budget allows a disruption, the replica is evicted.
    result = step(world([patched("a")], pods, [workload], [node], budgets=[budget("a-pdb", allowed=1)]),
                  previous_with(was("a", "Waiting", reason="DisruptionBudget")))
    assert result.actions == (RemountPod(NS, "a-1", "uid-a-1"),)


@pytest.mark.parametrize(("budgets", "named"), [
    ([budget("a-pdb", allowed=1, observed=False)], "does not reflect its current spec"),
    ([budget("one", allowed=1), budget("two", allowed=1)], "more than one budget covers"),
])
def test_budgets_the_eviction_api_refuses_for_other_reasons_leave_it_waiting_too(budgets, named):
    workload, pods, _ = rolled_out()
    node = report("n1", mount(pods[0]), mount(pods[1], COHERENT))
    result = step(world([patched("a")], pods, [workload], [node], budgets=budgets))
    assert result.actions == () and line(result)["reason"] == "DisruptionBudget" and named in line(result)["message"]


def test_a_budget_of_other_pods_or_selecting_nothing_holds_nothing_back():
    workload, pods, _ = rolled_out()
    node = report("n1", mount(pods[0]), mount(pods[1], COHERENT))
    others = [budget("other", app="b"), DisruptionBudget(NS, "none", None, 0),
              DisruptionBudget("elsewhere", "all", {}, 0)]
    assert step(world([patched("a")], pods, [workload], [node], budgets=others)).actions == (
        RemountPod(NS, "a-1", "uid-a-1"),)


def test_a_csi_staging_mount_on_the_superblock_is_not_another_consumer():
    workload, pods, _ = rolled_out(replicas=1)
    staging = ReportedMount(None, "pv-a", "/var/lib/kubelet/plugins/kubernetes.io/csi/efs/x/globalmount", "0:60", COHERENT)
    node = report("n1", mount(pods[0], COHERENT, "0:60", [staging.mount_point]), staging)
    assert step(world([patched("a")], pods, [workload], [node])).actions == (RemountPod(NS, "a-0", "uid-a-0"),)


def test_remounting_waits_for_the_workload_to_roll_out_again():
    workload, pods, node = rolled_out()
    busy = replace(workload, progress="1 of 2 updated replicas available")
    before = was("a", "Restarting", reason="Remounting", pod="a-1", node="n1", remounts=1)
    result = step(world([patched("a")], pods, [busy], [node]), previous_with(before))
    assert (line(result)["state"], line(result)["reason"], line(result)["remounts"]) == (
        "Restarting", "Remounting", 1)
    assert result.actions == ()


def test_an_old_superblock_another_consumer_holds_blocks_and_names_everything():
    workload, pods, _ = rolled_out(replicas=1)
    other = pod("other", 0, owner=WorkloadRef("ReplicaSet", NS, "other-rs"))
    node = report("n1", mount(pods[0], COHERENT, "0:60", [point(other)]), mount(other, COHERENT, "0:60",
                                                                                  [point(pods[0])]))
    w = world([patched("a")], [*pods, other], [workload], [node])
    result = step(w)
    assert result.actions == ()
    assert (line(result)["state"], line(result)["reason"], line(result)["pod"], line(result)["node"]) == (
        "Blocked", "SuperblockShared", "a-0", "n1")
    message = line(result)["message"]
    assert "pod shop/a-0 on node n1" in message and "superblock 0:60" in message and "pod shop/other-0" in message
    assert "Move or restart that consumer off node n1" in message
    assert result.status["phase"] == "Paused" and "paused at Deployment/shop/a: SuperblockShared" in (
        result.status["message"])
    assert [(e.warning, e.reason) for e in result.events if e.warning] == [(True, "SuperblockShared")]


def test_a_holder_that_mounts_none_of_the_profiles_claims_is_named_by_the_operators_pods():
    """A tick keeps only the pods of its claims; another pod holding the superblock is named by its UID."""
    workload, pods, _ = rolled_out(replicas=1)
    other = pod("other", 0)
    node = report("n1", mount(pods[0], COHERENT, "0:60", [point(other)]), mount(other, COHERENT, "0:60",
                                                                                  [point(pods[0])]))
    w = world([patched("a")], pods, [workload], [node])
    named = World(w.volumes, w.pods, w.workloads, w.parents, w.autoscalers, w.reports, w.budgets,
                  pod_name_of={other.uid: "team-b/other-0"}.get)
    assert "which pod team-b/other-0 still holds on that node" in line(step(named))["message"]
    assert f"which pod UID {other.uid} (mount {point(other)}) still holds" in line(step(w))["message"]


def test_an_unknown_holder_of_the_superblock_is_named_by_its_mount():
    workload, pods, _ = rolled_out(replicas=1)
    node = report("n1", mount(pods[0], COHERENT, "0:60", ["/mnt/elsewhere"]))
    assert "the mount at /mnt/elsewhere" in line(step(world([patched("a")], pods, [workload], [node])))["message"]


def test_options_that_are_neither_old_nor_new_block_as_absent():
    workload, pods, _ = rolled_out(replicas=1)
    result = step(world([patched("a")], pods, [workload], [report("n1", mount(pods[0], DROPPED))]))
    assert (line(result)["state"], line(result)["reason"]) == ("Blocked", "OptionsAbsent")
    assert "driver dropped them" in line(result)["message"] and "acregmin=600" in line(result)["message"]


def test_a_volume_s_recorded_previous_options_count_as_old():
    """Options of a version whose class is gone are still recognised, from the PV's annotation."""
    workload, pods, _ = rolled_out(replicas=1)
    gone = Target("p", V2, (V2,), AUTOMATIC)
    w = world([patched("a")], pods, [workload], [report("n1", mount(pods[0], COHERENT))])
    assert step(w, t=gone).actions == (RemountPod(NS, "a-0", "uid-a-0"),)


def test_remounts_stop_when_they_keep_finding_an_old_superblock():
    workload, pods, _ = rolled_out(replicas=1)
    w = world([patched("a")], pods, [workload], [report("n1", mount(pods[0], COHERENT))])
    result = step(w, previous_with(was("a", "Verifying", remounts=2)))
    assert (line(result)["state"], line(result)["reason"]) == ("Blocked", "RemountsExhausted")
    assert result.actions == () and "2 remounts did not help" in line(result)["message"]


def test_a_blocked_workload_is_done_once_the_nodes_agree():
    workload, pods, node = rolled_out()
    before = was("a", "Blocked", reason="SuperblockShared", verifyingSince=timestamp(EARLIER))
    result = step(world([patched("a")], pods, [workload], [node]), previous_with(before, phase="Paused"))
    assert line(result)["state"] == "Done" and result.status["phase"] == "Complete"


def test_done_is_kept_for_the_same_target_without_looking_again():
    workload, pods, _ = rolled_out()
    before = was("a", "Done", reason="Verified", message="ok", doneAt=timestamp(EARLIER))
    result = step(world([patched("a")], pods, [workload], []), previous_with(before, phase="Complete",
                                                                            completedAt=timestamp(EARLIER)))
    assert (line(result)["state"], line(result)["doneAt"]) == ("Done", timestamp(EARLIER))
    assert result.status["completedAt"] == timestamp(EARLIER)


def test_done_for_another_target_counts_for_nothing():
    w = world([patched("a")], [pod("a", 0), pod("a", 1)], [deployment("a")])
    before = was("a", "Done")
    result = step(w, previous_with(before, targetStorageClassName="p-v1", targetVersion=1, phase="Complete"))
    assert line(result)["state"] == "Restarting"


# -- zero replicas -----------------------------------------------------------------------------


@pytest.mark.parametrize(("autoscalers", "reason", "words"), [
    ([], "ScaledToZero", "scaled to zero"),
    ([Autoscaler("a", WorkloadRef("Deployment", NS, "a"), scaling_disabled=True)], "ScalingDisabled",
     "HorizontalPodAutoscaler a disabled"),
])
def test_a_workload_at_zero_waits_and_is_never_done(autoscalers, reason, words):
    w = world([volume("a")], [], [deployment("a", replicas=0)], autoscalers=autoscalers)
    result = step(w)
    assert (line(result)["state"], line(result)["reason"]) == ("Waiting", reason)
    assert words in line(result)["message"] and "deliberate scale-up" in line(result)["message"]
    # Recording the restart at zero moves no pod; a later scale-up is then its rollout.
    assert isinstance(result.actions[-1], RestartWorkload)
    assert result.status["phase"] == "Waiting" and "scale-up is needed" in result.status["message"]
    again = step(world([patched("a")], [], [deployment("a", replicas=0, restarted=True)], autoscalers=autoscalers),
                 result.status)
    assert again.actions == () and line(again)["state"] == "Waiting"


def test_a_daemonset_on_no_node_waits():
    result = step(world([volume("a")], [], [deployment("a", replicas=0, kind="DaemonSet")]))
    assert line(result)["state"] == "Waiting" and "runs on no node" in line(result)["message"]


def test_a_scaled_up_workload_that_was_restarted_at_zero_is_verified_not_restarted():
    workload, pods, node = rolled_out(replicas=1)
    before = was("a", "Waiting", reason="ScaledToZero")
    result = step(world([patched("a")], pods, [workload], [node]), previous_with(before, phase="Waiting"))
    assert result.actions == () and line(result)["state"] == "Done"


# -- several workloads -------------------------------------------------------------------------


def three_pending():
    names = ("a", "b", "c")
    return world([volume(n) for n in names], [pod(n, 0) for n in names], [deployment(n, 1) for n in names])


@pytest.mark.parametrize(("limit", "started"), [(1, ["a"]), (2, ["a", "b"]), (5, ["a", "b", "c"])])
def test_max_concurrent_workloads_bounds_the_restarts(limit, started):
    result = step(three_pending(), t=target(replace(AUTOMATIC, max_concurrent_workloads=limit)))
    assert [a.ref.name for a in result.actions if isinstance(a, RestartWorkload)] == started
    assert [w["state"] for w in result.status["workloads"]].count("Pending") == 3 - len(started)


def test_the_next_workload_starts_in_the_tick_the_previous_is_done():
    workload, pods, node = rolled_out("a", 1)
    w = world([patched("a"), volume("b")], [*pods, pod("b", 0)], [workload, deployment("b", 1)], [node])
    result = step(w)
    assert [(x["name"], x["state"]) for x in result.status["workloads"]] == [("a", "Done"), ("b", "Restarting")]


def test_a_blocked_workload_pauses_the_rest():
    workload, pods, _ = rolled_out("a", 1)
    w = world([patched("a"), volume("b")], [*pods, pod("b", 0)], [workload, deployment("b", 1)],
              [report("n1", mount(pods[0], DROPPED))])
    result = step(w, t=target(replace(AUTOMATIC, max_concurrent_workloads=2)))
    assert not any(isinstance(a, RestartWorkload) for a in result.actions)
    assert (line(result, "b")["state"], line(result, "b")["reason"]) == ("Pending", "Paused")


def test_a_workload_in_a_rollout_of_its_own_is_not_restarted_on_top_of_it():
    """A superseded restart still rolling: it holds the slot until its rollout completes."""
    w = world([patched("a"), patched("b")], [pod("a", 0), pod("b", 0)],
              [deployment("a", 1, progress="0 of 1 replicas updated"), deployment("b", 1)])
    result = step(w)
    assert result.actions == ()
    assert (line(result, "a")["state"], line(result, "a")["reason"]) == ("Pending", "RollingOut")
    assert line(result, "b")["reason"] == "Queued"


def test_a_new_target_supersedes_an_unfinished_rollout():
    v3 = Version("p-v3", 3, ("vers=4.1", "hard", "nconnect=2"))
    w = world([patched("a")], [pod("a", 0)], [deployment("a", 1, restarted=True)])
    before = previous_with(was("a", "Done"), phase="Progressing")
    result = step(w, before, t=Target("p", v3, (V1, V2, v3), AUTOMATIC))
    assert result.status["supersedes"] == "p-v2" and result.status["targetStorageClassName"] == "p-v3"
    assert result.status["fromVersions"] == [2]
    assert [a.storage_class for a in result.actions if isinstance(a, RestartWorkload)] == ["p-v3"]
    assert ("RolloutSuperseded", False) in [(e.reason, e.warning) for e in result.events]


def test_a_finished_rollout_is_not_superseded_by_the_next():
    w = world([patched("a")], [pod("a", 0)], [deployment("a", 1, restarted=True)])
    before = previous_with(was("a", "Done"), phase="Complete", targetStorageClassName="p-v1", targetVersion=1)
    assert step(w, before).status["supersedes"] is None


# -- which PVs a tick patches: only those of the workload whose turn it is ----------------------


def patches(result) -> list[str]:
    return [a.name for a in result.actions if isinstance(a, PatchVolume)]


def test_only_the_workload_whose_turn_it_is_has_its_volumes_patched_just_before_its_restart():
    result = step(three_pending())
    assert [(type(a).__name__, getattr(a, "name", None) or a.ref.name) for a in result.actions] == [
        ("PatchVolume", "pv-a"), ("RestartWorkload", "a")]
    assert result.status["volumesPatched"] == 1


def test_the_next_workload_s_volumes_are_patched_in_the_tick_it_starts_and_not_before():
    workload, pods, node = rolled_out("a", 1)
    w = world([patched("a"), volume("b"), volume("c")], [*pods, pod("b", 0), pod("c", 0)],
              [workload, deployment("b", 1), deployment("c", 1)], [node])
    result = step(w)
    assert [type(a).__name__ for a in result.actions] == ["PatchVolume", "RestartWorkload"]
    assert patches(result) == ["pv-b"] and result.actions[1].ref.name == "b"


def test_a_blocked_workload_leaves_every_later_workload_s_volumes_unpatched():
    workload, pods, _ = rolled_out("a", 1)
    w = world([patched("a"), volume("b"), volume("c")], [*pods, pod("b", 0), pod("c", 0)],
              [workload, deployment("b", 1), deployment("c", 1)], [report("n1", mount(pods[0], DROPPED))])
    result = step(w, t=target(replace(AUTOMATIC, max_concurrent_workloads=3)))
    assert line(result)["state"] == "Blocked" and result.status["phase"] == "Paused"
    assert result.actions == ()


def test_a_workload_under_way_gets_a_volume_that_is_not_patched_yet_patched_again():
    """A PV added to it, or set back by another writer: each tick of its turn patches what is not the target's."""
    w = world([volume("a")], [pod("a", 0)], [deployment("a", 1, restarted=True, progress="0 of 1 replicas updated")])
    assert patches(step(w)) == ["pv-a"]


def test_a_volume_two_workloads_share_is_patched_once_at_the_first_one_s_turn():
    shared = replace(pod("b", 0), claims={"a": "data"})
    b = replace(deployment("b", 1), claims=("a",))
    result = step(world([volume("a")], [pod("a", 0), shared], [deployment("a", 1), b]))
    assert patches(result) == ["pv-a"]
    assert [a.ref.name for a in result.actions if isinstance(a, RestartWorkload)] == ["a"]


def test_a_workload_at_zero_has_its_volumes_patched_before_its_restart_is_recorded():
    result = step(world([volume("a")], [], [deployment("a", replicas=0)]))
    assert [type(a).__name__ for a in result.actions] == ["PatchVolume", "RestartWorkload"]


def test_volumes_no_workload_restarts_are_patched_once_every_workload_is_finished():
    """Unused PVs and those only Jobs or bare pods mount: not while a workload can still stop the rollout."""
    bare = replace(pod("j", 0), owner=None)
    unused = Volume("pv-unused", "p-v1", COHERENT, (NS, "unused"))
    pending = world([volume("a"), volume("j"), unused], [pod("a", 0), bare], [deployment("a", 1)])
    assert patches(step(pending)) == ["pv-a"]
    workload, pods, node = rolled_out("a", 1)
    done = world([patched("a"), volume("j"), unused], [*pods, bare], [workload], [node])
    result = step(done)
    assert line(result)["state"] == "Done" and result.status["phase"] == "Complete"
    assert patches(result) == ["pv-j", "pv-unused"]
    assert result.status["volumesPatched"] == 3


def test_without_any_workload_every_volume_is_patched_at_once():
    assert patches(step(world([volume("a"), volume("b")], [], []))) == ["pv-a", "pv-b"]


def test_each_patch_is_guarded_by_the_resource_version_its_volume_was_read_at():
    w = world([volume("a", resource_version="1234")], [pod("a", 0)], [deployment("a", 1)])
    (patch,) = [a for a in step(w).actions if isinstance(a, PatchVolume)]
    assert patch.resource_version == "1234"
    assert patch.body()["metadata"]["resourceVersion"] == "1234"


# -- who is restarted, who is only reported ----------------------------------------------------


def test_jobs_cronjobs_and_bare_pods_are_reported_never_restarted():
    job = WorkloadRef("Job", NS, "nightly-123")
    cron = WorkloadRef("CronJob", NS, "nightly")
    pods = [pod("a", 0, owner=job), replace(pod("a", 1), owner=None)]
    w = world([volume("a")], pods, [], parents={job: cron})
    result = step(w)
    assert not any(isinstance(a, RestartWorkload | RemountPod) for a in result.actions)
    records = {r["kind"]: r for r in result.status["consumersOnOlderVersions"]}
    assert records["CronJob"]["note"] == "picks up the new options at its next run"
    assert "never deletes" in records["Pod"]["note"] and records["Pod"]["name"] == "a-1"
    assert result.status["phase"] == "Complete"


def test_before_approval_a_bare_pod_is_listed_on_older_options():
    bare = replace(pod("a", 0), owner=None)
    result = step(world([volume("a")], [bare], []), t=target(Policy()))
    assert [r["name"] for r in result.status["consumersOnOlderVersions"]] == ["a-0"]


def test_a_bare_pod_already_on_the_new_options_is_not_listed():
    bare = replace(pod("a", 0), owner=None)
    w = world([patched("a")], [bare], [], [report("n1", mount(bare))])
    assert step(w).status["consumersOnOlderVersions"] == []


def test_thousands_of_bare_pods_are_counted_and_the_first_fifty_listed_so_the_status_fits_in_etcd():
    """bench/scale.py: a record for each of 4,000 bare pods, in two lists, made the status write fail (etcd refuses a
    request over 1.5 MiB); the retry, its volumes patched by then, never said who lost freshness."""
    volumes = [volume(f"v{n:04d}") for n in range(1000)]
    bare = [replace(pod(f"v{n % 1000:04d}", n), owner=None) for n in range(4000)]
    result = step(world(volumes, bare, []), t=target(Policy()))  # awaiting approval: nothing patched yet
    status = result.status
    assert status["consumersOnOlderVersionsCount"] == status["freshnessLossCount"] == 4000
    assert len(status["consumersOnOlderVersions"]) == len(status["freshnessLoss"]) == LISTED_CONSUMERS
    assert len(json.dumps(status)) < 256 * 1024
    RolloutStatus.model_validate(status)  # the CRD's shape
    # The plan (`mountwarden plan`) still names every one of them, in the same order.
    every = build_plan(target(Policy()), world(volumes, bare, [])).to_dict()["freshnessLoss"]
    assert len(every) == 4000 and every[:LISTED_CONSUMERS] == status["freshnessLoss"]


def test_a_few_consumers_are_all_listed_and_counted():
    bare = replace(pod("a", 0), owner=None)
    status = step(world([volume("a")], [bare], []), t=target(Policy())).status
    assert status["consumersOnOlderVersionsCount"] == status["freshnessLossCount"] == 1
    assert [r["name"] for r in status["freshnessLoss"]] == ["a-0"]


def test_a_statefulset_at_zero_is_found_through_its_claim_templates():
    sts = Workload(WorkloadRef("StatefulSet", NS, "db"), 0, "7", claim_templates=("data",))
    w = world([Volume("pv-0", "p-v1", COHERENT, (NS, "data-db-0")), Volume("pv-x", "p-v1", COHERENT,
                                                                           (NS, "data-dbx-0"))], [], [sts])
    (consumer,) = build_plan(target(), w).consumers
    assert consumer.ref == sts.ref and consumer.volumes == ("pv-0",)


def test_finished_pods_do_not_consume():
    done = replace(pod("a", 0), phase="Succeeded", owner=None)
    assert build_plan(target(), world([volume("a")], [done], [])).consumers == ()


# -- NewStorageClass ---------------------------------------------------------------------------


def test_new_storage_class_touches_nothing_and_lists_the_consumers_with_guidance():
    migrate = Policy(strategy="NewStorageClass", approval="Manual")
    w = world([volume("a"), volume("b", CACHED, "p-v2")], [pod("a", 0), pod("b", 0)],
              [deployment("a", 1), deployment("b", 1)])
    result = step(w, t=target(migrate))
    assert result.actions == () and result.status["workloads"] == []
    assert result.status["phase"] == "AwaitingMigration" and result.status["volumes"] == ["pv-a"]
    (consumer,) = result.status["consumersOnOlderVersions"]
    assert (consumer["name"], consumer["storageClassNames"]) == ("a", ["p-v1"])
    assert "new PVC of p-v2" in consumer["note"]
    assert "VACUUM INTO" in result.status["guidance"] and ".backup" in result.status["guidance"]
    assert "never with cp of a live file" in result.status["guidance"]
    assert result.status["fromVersions"] == [1]


def test_new_storage_class_with_every_volume_on_the_target_is_complete():
    migrate = Policy(strategy="NewStorageClass")
    result = step(world([volume("b", CACHED, "p-v2")], [pod("b", 0)], [deployment("b", 1)]), t=target(migrate))
    assert result.status["phase"] == "Complete" and result.status["guidance"] is None


# -- the status ------------------------------------------------------------------------------


def test_every_status_the_planner_writes_fits_the_crd_schema():
    """Fields missing from the model would be pruned by the API server (the schema is structural)."""
    workload, pods, _ = rolled_out(replicas=1)
    other = pod("other", 0, owner=None)
    worlds = [
        world([volume("a")], [pod("a", 0)], [deployment("a")]),
        world([patched("a")], [*pods, other], [workload],
              [report("n1", mount(pods[0], COHERENT, "0:1", [point(other)]), mount(other, COHERENT, "0:1"))]),
        world([volume("a")], [], [deployment("a", 0)]),
    ]
    validated = [RolloutStatus.model_validate({k: v for k, v in step(w, t=t).status.items() if v is not None})
                 for w in worlds for t in (target(), target(Policy()), target(Policy(strategy="NewStorageClass")))]
    assert len(validated) == 9  # model_validate raises on a field the CRD's schema would prune


def test_status_keys_that_no_longer_apply_are_cleared():
    """status.rollout is merge-patched: a key left out would keep its old value."""
    status = step(world([volume("a")], [pod("a", 0)], [deployment("a")])).status
    assert set(status) == {field.alias for field in RolloutStatus.model_fields.values()}
    assert status["supersedes"] is None and status["completedAt"] is None and status["guidance"] is None


def test_started_at_is_kept_while_the_target_stays():
    w = world([volume("a")], [pod("a", 0)], [deployment("a")])
    assert step(w, previous_with()).status["startedAt"] == timestamp(EARLIER)


def test_a_phase_change_is_an_event_and_an_unchanged_one_is_not():
    w = world([volume("a")], [pod("a", 0)], [deployment("a")])
    first = step(w, t=target(Policy()))
    assert [e.reason for e in first.events] == ["RolloutAwaitingApproval"]
    assert step(w, first.status, t=target(Policy())).events == ()


# -- when a tick needs the cluster at all ------------------------------------------------------


@pytest.mark.parametrize(("previous", "approved", "lineage", "older", "expected"), [
    (None, None, ["pv-a"], [], False),  # volumes only on the current class were provisioned with its options
    (None, None, ["pv-a"], ["pv-a"], True),
    ({"targetStorageClassName": "p-v1", "strategy": "PatchBoundVolumes", "phase": "Complete"}, None, [], [], True),
    ({"targetStorageClassName": "p-v2", "strategy": "NewStorageClass", "phase": "Complete"}, None, [], [], True),
    ({"targetStorageClassName": "p-v2", "strategy": "PatchBoundVolumes", "phase": "Complete",
      "volumes": ["pv-a"]}, None, ["pv-a"], ["pv-a"], False),
    ({"targetStorageClassName": "p-v2", "strategy": "PatchBoundVolumes", "phase": "Complete",
      "volumes": ["pv-a"]}, None, ["pv-a", "pv-b"], ["pv-a", "pv-b"], True),
    ({"targetStorageClassName": "p-v2", "strategy": "PatchBoundVolumes", "phase": "AwaitingApproval",
      "volumes": ["pv-a"]}, None, ["pv-a"], ["pv-a"], False),
    ({"targetStorageClassName": "p-v2", "strategy": "PatchBoundVolumes", "phase": "AwaitingApproval",
      "volumes": ["pv-a"]}, "2", ["pv-a"], ["pv-a"], True),
    ({"targetStorageClassName": "p-v2", "strategy": "PatchBoundVolumes", "phase": "Waiting",
      "volumes": ["pv-a"]}, None, ["pv-a"], ["pv-a"], True),
])
def test_a_tick_reads_the_cluster_only_when_something_can_move(previous, approved, lineage, older, expected):
    assert needs_world(previous, target(Policy(), approved), lineage, older) is expected


def test_needs_world_under_new_storage_class_compares_the_older_volumes():
    migrate = target(Policy(strategy="NewStorageClass"))
    previous = {"targetStorageClassName": "p-v2", "strategy": "NewStorageClass", "phase": "AwaitingMigration",
                "volumes": ["pv-a"]}
    assert needs_world(previous, migrate, ["pv-a", "pv-b"], ["pv-a"]) is False
    assert needs_world(previous, migrate, ["pv-a", "pv-b"], []) is True
