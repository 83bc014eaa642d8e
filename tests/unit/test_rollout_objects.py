"""The rollout planner's view of Kubernetes objects (their wire form), its actions, and the dry-run plan."""

import json
from datetime import UTC, datetime

import pytest
from tests.support import read_report

from mountwarden.adapters.pods import rollout_pods_of_page
from mountwarden.core.rollout import (
    Autoscaler,
    PatchVolume,
    Pod,
    Policy,
    RestartWorkload,
    Target,
    Version,
    Volume,
    Workload,
    WorkloadRef,
    World,
    build_plan,
    rollout_progress,
)

COHERENT = ["vers=4.1", "hard", "acregmax=3", "lookupcache=positive"]
CACHED = ["vers=4.1", "hard", "actimeo=600", "lookupcache=all"]


def test_a_bound_volume_knows_its_claim_and_what_mountwarden_did_to_it():
    pv = Volume.from_object({
        "metadata": {"name": "pv-a", "annotations": {"mountwarden.io/applied-version": "p-v2",
                                                     "mountwarden.io/previous-mount-options": "hard,actimeo=3"}},
        "spec": {"storageClassName": "p-v1", "mountOptions": CACHED, "claimRef": {"namespace": "shop", "name": "a"}},
        "status": {"phase": "Bound"},
    })
    assert pv == Volume("pv-a", "p-v1", tuple(CACHED), ("shop", "a"), "p-v2", ("hard", "actimeo=3"))


def test_a_released_volume_has_no_claim():
    pv = Volume.from_object({"metadata": {"name": "pv-a"},
                             "spec": {"storageClassName": "p-v1", "claimRef": {"namespace": "shop", "name": "a"}},
                             "status": {"phase": "Released"}})
    assert pv.claim is None and pv.mount_options == () and pv.previous_options == ()


def pod_read(obj: dict) -> Pod:
    """A pod as a rollout tick reads it: one item of a pod list, as the API server sends it."""
    (pod,), _ = rollout_pods_of_page(json.dumps({"kind": "PodList", "items": [obj]}).encode())
    return pod


def test_a_pod_knows_its_claims_owner_readiness_and_start():
    p = pod_read({
        "metadata": {"name": "a-1", "namespace": "shop", "uid": "u1",
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "a-rs", "controller": True}]},
        "spec": {"nodeName": "n1", "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "a"}},
                                                {"name": "tmp", "emptyDir": {}}]},
        "status": {"phase": "Running", "startTime": "2026-03-01T12:00:00Z",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert p == Pod("shop", "a-1", "u1", "n1", "Running", True, False,
                    datetime(2026, 3, 1, 12, tzinfo=UTC), {"a": "data"}, WorkloadRef("ReplicaSet", "shop", "a-rs"))
    assert p.live


def test_a_pending_deleted_pod_is_not_live():
    p = pod_read({"metadata": {"name": "a", "namespace": "shop", "uid": "u",
                               "deletionTimestamp": "2026-03-01T12:00:00Z"}, "spec": {}, "status": {}})
    assert (p.terminating, p.ready, p.started_at, p.owner, p.live) == (True, False, None, None, False)


def deployment_object(**status) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {"name": "a", "namespace": "shop", "generation": 3, "resourceVersion": "99"},
        "spec": {"replicas": 3, "template": {
            "metadata": {"annotations": {"mountwarden.io/restarted-for": "p-v2",
                                         "mountwarden.io/restarted-at": "2026-03-01T12:00:00Z"}},
            "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "a"}}]}}},
        "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3,
                   "readyReplicas": 3, **status},
    }


def test_a_deployment_knows_its_restart_and_its_claims():
    workload = Workload.from_object(deployment_object())
    assert workload == Workload(WorkloadRef("Deployment", "shop", "a"), 3, "99", "p-v2", "2026-03-01T12:00:00Z",
                                ("a",), (), "")
    assert workload.rolled_out


@pytest.mark.parametrize(("status", "waits_for"), [
    ({}, ""),
    ({"observedGeneration": 2}, "the Deployment controller has not seen the change yet"),
    ({"updatedReplicas": 1}, "1 of 3 replicas updated"),
    ({"replicas": 4}, "1 old replicas pending termination"),
    ({"availableReplicas": 2}, "2 of 3 updated replicas available"),
])
def test_deployment_rollout_progress(status, waits_for):
    assert Workload.from_object(deployment_object(**status)).progress == waits_for


@pytest.mark.parametrize(("spec", "status", "waits_for"), [
    ({}, {"updatedReplicas": 2, "readyReplicas": 2, "currentRevision": "r2", "updateRevision": "r2"}, ""),
    ({}, {"updatedReplicas": 1, "readyReplicas": 2, "currentRevision": "r1", "updateRevision": "r2"},
     "1 of 2 replicas updated"),
    ({}, {"updatedReplicas": 2, "readyReplicas": 2, "currentRevision": "r1", "updateRevision": "r2"},
     "the update revision is not current yet"),
    ({}, {"updatedReplicas": 2, "readyReplicas": 1, "currentRevision": "r2", "updateRevision": "r2"},
     "1 of 2 replicas ready"),
    ({"updateStrategy": {"type": "OnDelete"}}, {}, "updateStrategy OnDelete"),
])
def test_statefulset_rollout_progress(spec, status, waits_for):
    obj = {"kind": "StatefulSet", "metadata": {"name": "db", "namespace": "shop", "generation": 1},
           "spec": {"replicas": 2, "volumeClaimTemplates": [{"metadata": {"name": "data"}}], **spec},
           "status": {"observedGeneration": 1, **status}}
    workload = Workload.from_object(obj)
    assert workload.progress.startswith(waits_for) and bool(workload.progress) == bool(waits_for)
    assert workload.claim_templates == ("data",)
    assert workload.uses_claim("data-db-1") and not workload.uses_claim("data-db-x")
    assert not workload.uses_claim("data-dbx-1")


@pytest.mark.parametrize(("status", "waits_for"), [
    ({"desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}, ""),
    ({"desiredNumberScheduled": 3, "updatedNumberScheduled": 2, "numberAvailable": 3}, "2 of 3 nodes updated"),
    ({"desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 1}, "1 of 3 nodes available"),
])
def test_daemonset_rollout_progress(status, waits_for):
    obj = {"kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "shop"}, "spec": {},
           "status": status}
    workload = Workload.from_object(obj)
    assert workload.progress == waits_for and workload.replicas == 3


def test_rollout_progress_refuses_kinds_it_does_not_restart():
    with pytest.raises(ValueError, match="Job"):
        rollout_progress("Job", {}, {}, {}, 1)


@pytest.mark.parametrize(("conditions", "disabled"), [
    ([{"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled"}], True),
    ([{"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric"}], False),
    ([], False),
])
def test_an_autoscaler_is_disabled_only_by_scaling_disabled(conditions, disabled):
    hpa = Autoscaler.from_object({"metadata": {"name": "h", "namespace": "shop"},
                                  "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "a"}},
                                  "status": {"conditions": conditions}})
    assert hpa == Autoscaler("h", WorkloadRef("Deployment", "shop", "a"), disabled)


def test_a_node_report_is_read_from_its_spec():
    report = read_report("n1", scanTime="2026-03-01T12:00:00.5Z", volumes=[
        {"podUid": "u1", "volumeName": "pv-a", "mountPoint": "/m", "superblock": "0:51", "effectiveOptions": CACHED,
         "sharedWith": ["/o"]}])
    assert report.scan_time == datetime(2026, 3, 1, 12, 0, 0, 500000, tzinfo=UTC)
    (mount,) = report.mounts
    assert (mount.pod_uid, mount.superblock, mount.shared_with) == ("u1", "0:51", ("/o",))
    assert report.at("/m") is mount and report.at("/x") is None


def test_volume_patch_keeps_the_previous_options_beside_the_new_under_the_resource_version_read():
    assert PatchVolume("pv-a", ("hard",), ("soft", "actimeo=3"), "p-v2", resource_version="77").body() == {
        "metadata": {"annotations": {"mountwarden.io/applied-version": "p-v2",
                                     "mountwarden.io/previous-mount-options": '["soft","actimeo=3"]'},
                     "resourceVersion": "77"},
        "spec": {"mountOptions": ["hard"]},
    }


SELINUX = ("vers=4.1", 'context="system_u:object_r:nfs_t:s0:c1,c2"', "hard")


def test_previous_options_with_a_comma_in_an_option_round_trip_through_the_annotation():
    body = PatchVolume("pv-a", ("hard",), SELINUX, "p-v2", resource_version="5").body()
    pv = Volume.from_object({"metadata": {"name": "pv-a", **body["metadata"], "resourceVersion": "6"},
                             "spec": {"storageClassName": "p-v1", **body["spec"]}})
    assert pv.previous_options == SELINUX and pv.resource_version == "6"


@pytest.mark.parametrize(("written", "read"), [
    ("hard,actimeo=3", ("hard", "actimeo=3")),  # what versions before the JSON array wrote
    ('["hard","actimeo=3"]', ("hard", "actimeo=3")),
    ("", ()),
    ("[not json", ("[not json",)),
])
def test_previous_options_are_read_in_the_json_form_and_the_older_comma_joined_one(written, read):
    pv = Volume.from_object({"metadata": {"name": "pv-a", "annotations": {
        "mountwarden.io/previous-mount-options": written}}, "spec": {}})
    assert pv.previous_options == read


def test_restart_records_its_target_in_the_template_under_the_read_resource_version():
    body = RestartWorkload(WorkloadRef("Deployment", "shop", "a"), "99", "p-v2", "2026-03-01T12:00:00Z").body()
    assert body == {"metadata": {"resourceVersion": "99"}, "spec": {"template": {"metadata": {"annotations": {
        "mountwarden.io/restarted-for": "p-v2", "mountwarden.io/restarted-at": "2026-03-01T12:00:00Z"}}}}}


def test_version_of_reads_deleted_versions_from_their_class_name():
    t = Target("p", Version("p-v3", 3, ()), (Version("p-v3", 3, ()),))
    assert (t.version_of("p-v3"), t.version_of("p-v1"), t.version_of("q-v1"), t.version_of(None)) == (
        3, 1, None, None)


def test_the_dry_run_lists_volumes_workloads_actions_and_warnings():
    rs = WorkloadRef("ReplicaSet", "shop", "a-rs")
    deployment = WorkloadRef("Deployment", "shop", "a")
    world = World(
        volumes=(Volume("pv-a", "p-v1", tuple(COHERENT), ("shop", "a")), Volume("pv-idle", "p-v1", tuple(COHERENT),
                                                                                ("shop", "idle")),
                 Volume("pv-loose", "p-v1", tuple(COHERENT))),
        pods=(Pod("shop", "a-1", "u1", "n1", "Running", True, False, None, {"a": "data"}, rs),
              Pod("shop", "loner", "u2", "n1", "Running", True, False, None, {"a": "data"}, None)),
        workloads=(Workload(deployment, 1, "1", claims=("a",)),
                   Workload(WorkloadRef("Deployment", "shop", "zero"), 0, "1", claims=("idle",))),
        parents={rs: deployment},
    )
    target = Target("p", Version("p-v2", 2, tuple(CACHED)), (Version("p-v1", 1, tuple(COHERENT)),),
                    Policy(approval="Manual"))
    plan = build_plan(target, world).to_dict()
    assert (plan["profile"], plan["fromVersions"], plan["toVersion"], plan["strategy"]) == (
        "p", [1], 2, "PatchBoundVolumes")
    assert [(v["name"], v["claim"], v["action"]) for v in plan["volumes"]] == [
        ("pv-a", "shop/a", "patch"), ("pv-idle", "shop/idle", "patch"), ("pv-loose", None, "patch")]
    assert [(w["kind"], w["name"], w["replicas"], w["pods"], w["action"]) for w in plan["workloads"]] == [
        ("Deployment", "a", 1, ["a-1"], "restart"),
        ("Pod", "loner", None, ["loner"], "none"),
        ("Deployment", "zero", 0, [], "wait"),
    ]
    assert plan["workloads"][1]["note"].startswith("a bare pod")
    warnings = "\n".join(plan["warnings"])
    assert "pv-loose is not bound" in warnings and "pod shop/loner has no controller" in warnings
    assert "Deployment/shop/zero: scaled to zero" in warnings
    assert 'mountwarden.io/approve-rollout: "2"' in warnings


def test_the_dry_run_under_new_storage_class_migrates():
    world = World(volumes=(Volume("pv-a", "p-v1", tuple(COHERENT), ("shop", "a")),),
                  pods=(Pod("shop", "a-1", "u1", "n1", "Running", True, False, None, {"a": "data"}, None),))
    target = Target("p", Version("p-v2", 2, tuple(CACHED)), (Version("p-v1", 1, tuple(COHERENT)),),
                    Policy(strategy="NewStorageClass"))
    plan = build_plan(target, world).to_dict()
    assert [v["action"] for v in plan["volumes"]] == ["keep"] and plan["fromVersions"] == [1]
    assert [w["action"] for w in plan["workloads"]] == ["migrate"]


def test_the_dry_run_notes_workloads_already_restarted_and_replica_sets_without_deployment():
    bare_rs = WorkloadRef("ReplicaSet", "shop", "orphan")
    done = WorkloadRef("Deployment", "shop", "done")
    world = World(
        volumes=(Volume("pv-a", "p-v1", tuple(CACHED), ("shop", "a")),),
        pods=(Pod("shop", "orphan-1", "u1", "n1", "Running", True, False, None, {"a": "data"}, bare_rs),),
        workloads=(Workload(done, 1, "1", restarted_for="p-v2", claims=("a",)),),
        parents={bare_rs: None},
    )
    target = Target("p", Version("p-v2", 2, tuple(CACHED)), (Version("p-v1", 1, tuple(COHERENT)),))
    plan = build_plan(target, world).to_dict()
    assert [(w["kind"], w["action"], w["note"]) for w in plan["workloads"]] == [
        ("Deployment", "none", "already restarted for p-v2"),
        ("ReplicaSet", "none", "a ReplicaSet mountwarden cannot restart: delete its pods to remount"),
    ]
    assert plan["volumes"][0]["action"] == "keep"
