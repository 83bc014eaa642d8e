"""Adoption (mountwarden.core.adoption, and the rollout it goes through): what a profile takes over, what it
refuses and why, the approval that covers it, and what becomes of the classes."""

from dataclasses import replace
from datetime import UTC, datetime

from mountwarden.core.adoption import (
    Adopter,
    AdoptionPhase,
    CandidateVolume,
    RefusalReason,
    approval_key,
    approves,
    class_fate,
    differences,
    select,
)
from mountwarden.core.findings import Reason
from mountwarden.core.options.normalize import normalize
from mountwarden.core.rollout import (
    PatchVolume,
    Policy,
    RestartWorkload,
    Target,
    Version,
    Volume,
    Workload,
    WorkloadRef,
    World,
    advance,
    build_plan,
)
from mountwarden.core.rollout.status import adoption_status
from mountwarden.core.storageclass import ClassEntry

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
EFS = "efs.csi.aws.com"
STAGING = ("vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
           "acregmin=0", "acregmax=0", "lookupcache=positive", "cto")
IMPORT = ("vers=4.1", "sync", "actimeo=0", "lookupcache=none")


def pv(name, storage_class="efs-sc", *, labels=None, source="efs", adopted_by=None, provisioned_by=None) -> dict:
    spec: dict = {"storageClassName": storage_class, "claimRef": {"namespace": "shop", "name": name},
                  "mountOptions": list(IMPORT)}
    if source == "efs":
        spec["csi"] = {"driver": EFS, "volumeHandle": "fs-0123456789abcdef0::fsap-1"}
    elif source == "nfs":
        spec["nfs"] = {"server": "10.0.0.5", "path": f"/exports/{name}"}
    else:
        spec["csi"] = {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}
    annotations = {key: value for key, value in (("mountwarden.io/adopted-by", adopted_by),
                                                 ("pv.kubernetes.io/provisioned-by", provisioned_by)) if value}
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations}, "spec": spec}


def candidates(*pvs) -> list[CandidateVolume]:
    return [CandidateVolume.from_object(obj) for obj in pvs]


CLASSES = {
    "efs-sc": ClassEntry("efs-sc", EFS, is_default=True, mount_options=IMPORT),
    "nfs-client": ClassEntry("nfs-client", "k8s-sigs.io/nfs-subdir-external-provisioner"),
    "uploads-v1": ClassEntry("uploads-v1", EFS, profile="uploads", version=1),
    "taken-sc": ClassEntry("taken-sc", EFS, adopted_by="uploads"),
}


def importer(**fields) -> Adopter:
    return Adopter("importer", provisioner=EFS, created_at="2026-03-01T10:00:00Z", **fields)


def test_a_class_of_the_profiles_provisioner_gives_its_bound_volumes():
    selection = select(importer(storage_class_names=("efs-sc",)), [], CLASSES,
                       candidates(pv("a"), pv("b"), pv("c", "gp3", source="ebs")))
    assert selection.volumes == ("a", "b") and selection.classes == ("efs-sc",) and not selection.refusals


def test_each_refusal_names_the_field_and_the_reason():
    adopter = importer(storage_class_names=("uploads-v1", "taken-sc", "nfs-client", "efs-sc"),
                       volume_selector={"matchLabels": {"team": "data"}})
    volumes = candidates(pv("a"), pv("ebs", "gp3", labels={"team": "data"}, source="ebs"),
                         pv("theirs", "", labels={"team": "data"}, adopted_by="uploads"),
                         pv("made-elsewhere", "", labels={"team": "data"}, source="nfs",
                            provisioned_by="k8s-sigs.io/nfs-subdir-external-provisioner"),
                         pv("by-hand", "", labels={"team": "data"}, source="nfs"))
    selection = select(adopter, [], CLASSES, volumes)
    refused = {(r.field, r.reason) for r in selection.refusals}
    assert refused == {
        ("spec.adopt.storageClassNames[0]", RefusalReason.CLASS_GOVERNED),
        ("spec.adopt.storageClassNames[1]", RefusalReason.CLASS_ADOPTED),
        ("spec.adopt.storageClassNames[2]", RefusalReason.PROVISIONER_DIFFERS),
        ("spec.adopt.volumeSelector", RefusalReason.NOT_NETWORK_STORAGE),
        ("spec.adopt.volumeSelector", RefusalReason.VOLUME_ADOPTED),
        ("spec.adopt.volumeSelector", RefusalReason.PROVISIONER_DIFFERS),
    }
    # An in-tree volume made by hand names no provisioner: it may be adopted by a profile of any NFS backend.
    assert selection.volumes == ("a", "by-hand")
    message = next(r.message for r in selection.refusals if r.reason is RefusalReason.PROVISIONER_DIFFERS
                   and "StorageClass" in r.message)
    assert "nfs-subdir-external-provisioner" in message and EFS in message
    finding = selection.refusals[0].finding("importer")
    assert finding.reason is Reason.ADOPTION_REFUSED and finding.message.startswith("spec.adopt.storageClassNames[0]")
    assert finding.subject.kind == "StorageProfile" and finding.remedy


def test_of_two_profiles_adopting_one_thing_the_first_keeps_it():
    first = importer(storage_class_names=("efs-sc",))
    second = Adopter("reports", provisioner=EFS, created_at="2026-03-01T11:00:00Z",
                     volume_selector={"matchLabels": {"team": "data"}}, storage_class_names=("efs-sc",))
    volumes = candidates(pv("a", labels={"team": "data"}))
    assert select(first, [second], CLASSES, volumes).volumes == ("a",)
    late = select(second, [first], CLASSES, volumes)
    assert late.volumes == ()
    assert [(r.field, r.reason) for r in late.refusals] == [("spec.adopt.storageClassNames[0]",
                                                            RefusalReason.CLASS_ADOPTED)]
    by_label_only = Adopter("reports", provisioner=EFS, created_at="2026-03-01T11:00:00Z",
                            volume_selector={"matchLabels": {"team": "data"}})
    (refusal,) = select(by_label_only, [first], CLASSES, volumes).refusals
    assert refusal.reason is RefusalReason.VOLUME_ADOPTED and "importer" in refusal.message


def test_adopting_needs_patch_bound_volumes():
    selection = select(importer(storage_class_names=("efs-sc",), patches_volumes=False), [], CLASSES,
                       candidates(pv("a")))
    assert selection.volumes == ()
    (refusal,) = selection.refusals
    assert refusal.field == "spec.rollout.strategy" and "PatchBoundVolumes" in refusal.message


def test_an_approval_given_before_a_volume_joined_does_not_cover_it():
    key = approval_key(1, {"a", "b"})
    assert key.startswith("1-adopt-") and key != approval_key(1, {"a", "b", "c"})
    assert approves(key, 1, {"b", "a"})
    assert not approves(key, 1, {"a", "b", "c"}) and not approves("1", 1, {"a"})
    # Once its volumes are adopted the approval holds for the rest of its rollout, and not for version 2.
    assert approves(key, 1, set()) and not approves(key, 2, set())
    assert approval_key(3, ()) == "3" and approves("3", 3, ())


def test_differences_say_each_option_as_a_mount_names_it():
    contract = normalize(STAGING).options
    found = {d["option"]: (d["contract"], d["volume"]) for d in differences(IMPORT, contract)}
    assert found["sync"] == ("async", "sync")
    assert found["lookupcache"] == ("lookupcache=positive", "lookupcache=none")
    assert found["resvport"] == ("noresvport", "resvport")
    assert found["acdirmin=0,acdirmax=0"] == ("acdirmin=30,acdirmax=60", "acdirmin=0,acdirmax=0")


def test_on_approval_the_class_is_annotated_and_the_default_moves_and_a_class_no_longer_named_is_released():
    classes = {**CLASSES, "old-sc": ClassEntry("old-sc", EFS, adopted_by="importer", superseded_by="importer-v1")}
    fate = class_fate("importer", ["efs-sc"], classes, "importer-v1", make_default=True)
    by_name = {patch.name: dict(patch.annotations) for patch in fate.patches}
    assert by_name["efs-sc"] == {"mountwarden.io/adopted-by": "importer", "mountwarden.io/superseded-by": "importer-v1",
                                 "storageclass.kubernetes.io/is-default-class": None}
    assert by_name["old-sc"] == {"mountwarden.io/adopted-by": None, "mountwarden.io/superseded-by": None}
    kept = class_fate("importer", ["efs-sc"], classes, "importer-v1", make_default=False)
    assert "storageclass.kubernetes.io/is-default-class" not in dict(kept.patches[0].annotations)


# -- through the rollout ----------------------------------------------------------------------------------------

V1 = Version("importer-v1", 1, STAGING)


def world(*volumes: Volume) -> World:
    workload = Workload(WorkloadRef("Deployment", "shop", "importer"), 1, "7", claims=tuple(v.claim[1] for v in volumes))
    return World(volumes, workloads=(workload,))


def adopting_target(approved: str | None, volumes: tuple[Volume, ...]) -> Target:
    names = frozenset(v.name for v in volumes)
    pending = frozenset(v.name for v in volumes if v.adopted_by != "importer")
    return Target("importer", V1, (V1,), Policy(), approved, adopted=names, adopting=pending)


def test_an_adoption_only_observes_until_the_approval_names_it_then_patches_and_annotates_every_volume():
    volumes = (Volume("pv-a", "efs-sc", IMPORT, ("shop", "a")), Volume("pv-b", "efs-sc", STAGING, ("shop", "b")))
    waiting = adopting_target("1", volumes)  # version 1 approved before the adoption: it does not cover it
    plan = build_plan(waiting, world(*volumes))
    step = advance(plan, None, NOW)
    assert step.actions == () and step.status["phase"] == "AwaitingApproval"
    assert f"mountwarden.io/approve-rollout={waiting.approval_key} --overwrite" in step.status["message"]
    assert [c.action for c in plan.volumes] == ["adopt", "adopt"]
    observed = adoption_status(plan, select_of(volumes), normalize(STAGING).options, step.status, step.actions)
    assert observed["phase"] == AdoptionPhase.AWAITING_APPROVAL and observed["approvalKey"] == waiting.approval_key
    assert [v["state"] for v in observed["volumes"]] == ["Pending", "Pending"]
    assert {d["option"] for d in observed["volumes"][0]["differences"]} >= {"sync", "lookupcache"}
    assert observed["volumes"][1]["differences"] == []  # already the contract's options: adopted all the same
    assert observed["workloads"] == ["Deployment/shop/importer"]

    approved = adopting_target(waiting.approval_key, volumes)
    step = advance(build_plan(approved, world(*volumes)), step.status, NOW)
    patches = [a for a in step.actions if isinstance(a, PatchVolume)]
    assert [(p.name, p.adopted_by, p.mount_options) for p in patches] == [("pv-a", "importer", STAGING),
                                                                          ("pv-b", "importer", STAGING)]
    assert patches[0].body()["metadata"]["annotations"]["mountwarden.io/adopted-by"] == "importer"
    assert any(isinstance(a, RestartWorkload) for a in step.actions)
    # The next tick sees the annotations: nothing is pending, and the approval still holds.
    adopted = tuple(Volume(v.name, v.storage_class, STAGING, v.claim, applied_version="importer-v1",
                           previous_options=v.mount_options, adopted_by="importer") for v in volumes)
    after = adopting_target(waiting.approval_key, adopted)
    assert after.adopting == frozenset() and after.approved


def test_an_adopted_volume_stays_pending_until_the_turn_of_the_workload_that_mounts_it():
    volumes = (Volume("pv-a", "efs-sc", IMPORT, ("shop", "a")), Volume("pv-b", "efs-sc", IMPORT, ("shop", "b")))
    workloads = tuple(Workload(WorkloadRef("Deployment", "shop", f"importer-{v.claim[1]}"), 1, "7",
                               claims=(v.claim[1],)) for v in volumes)
    pending = adopting_target(None, volumes)
    approved = adopting_target(pending.approval_key, volumes)
    plan = build_plan(approved, World(volumes, workloads=workloads))
    step = advance(plan, None, NOW)
    assert [a.name for a in step.actions if isinstance(a, PatchVolume)] == ["pv-a"]
    observed = adoption_status(plan, select_of(volumes), normalize(STAGING).options, step.status, step.actions)
    assert [(v["name"], v["state"]) for v in observed["volumes"]] == [("pv-a", "Adopted"), ("pv-b", "Pending")]
    assert observed["phase"] == AdoptionPhase.ADOPTING
    # The next tick: pv-a adopted, pv-b still to adopt; the approval given for both still holds.
    midway = (replace(volumes[0], adopted_by="importer", mount_options=STAGING), volumes[1])
    after = adopting_target(pending.approval_key, midway)
    assert after.adopting == frozenset({"pv-b"}) and after.approved


def select_of(volumes):
    from mountwarden.core.adoption import Selection
    return Selection(importer(storage_class_names=("efs-sc",)), tuple(v.name for v in volumes), ("efs-sc",))
