"""StorageProfiles reconcile into versioned StorageClasses on a real kube-apiserver."""

import json
import signal

import kubernetes
import pytest
from tests.support import profile_body, wait_for

pytestmark = pytest.mark.cluster

CACHED = ["vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
          "acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600", "lookupcache=all"]
STAGING = ["vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
           "acregmin=0", "acregmax=0", "lookupcache=positive", "cto"]


def ready(kube, name):
    condition = kube.condition(name, "Ready")
    return condition if condition and condition["status"] == "True" else None


def class_names(kube, profile):
    return sorted(kube.classes_of(profile))


def bound_pv(kube, name, storage_class):
    """A static PV naming the class, as a provisioned EFS volume would."""
    kube.core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                 "nfs": {"server": "fs-0123456789abcdef0.efs.us-east-1.amazonaws.com", "path": "/"}},
    })


def wait_held(kube, name, storage_class):
    """Until the operator's PV watch has the PV: its history names the class's holders (else v1 looks unused)."""
    wait_for(lambda: any(record["storageClassName"] == storage_class and record.get("heldBy")
                         for record in (kube.profile(name).get("status") or {}).get("history") or []),
             what=f"{storage_class} held by its PV in {name}'s history")


def test_profile_becomes_v1_with_canonical_options(kube, operator, unique):
    name = f"scratch-{unique}"
    kube.apply_profile(profile_body(name, "cached"))
    condition = wait_for(lambda: ready(kube, name), what=f"{name} Ready")
    assert condition["reason"] == "Reconciled"
    (cls,) = kube.classes_of(name).values()
    assert cls.metadata.name == f"{name}-v1"
    assert cls.mount_options == CACHED
    assert cls.provisioner == "efs.csi.aws.com"
    assert cls.parameters == {"provisioningMode": "efs-ap", "fileSystemId": "fs-0123456789abcdef0"}
    assert cls.metadata.labels["mountwarden.io/version"] == "1"
    status = kube.profile(name)["status"]
    assert status["storageClassName"] == f"{name}-v1" and status["version"] == 1
    assert status["effectiveMountOptions"] == CACHED
    assert status["observedGeneration"] == kube.profile(name)["metadata"]["generation"]


def test_policy_change_makes_v2_and_deletes_unused_v1(kube, operator, unique):
    name = f"upload-{unique}"
    kube.apply_profile(profile_body(name, "staging"))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1"], what="v1")
    kube.apply_profile(profile_body(name, "cached"))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v2"], what="v2 alone")
    assert kube.classes_of(name)[f"{name}-v2"].mount_options == CACHED
    status = wait_for(lambda: (kube.profile(name)["status"] if kube.profile(name)["status"].get("version") == 2
                               else None), what="status v2")
    assert [h["storageClassName"] for h in status["history"]] == [f"{name}-v2"]


def test_pv_bound_to_v1_keeps_it_alive_until_it_goes(kube, operator, unique):
    name = f"held-{unique}"
    kube.apply_profile(profile_body(name, "staging"))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1"], what="v1")
    bound_pv(kube, f"pv-{unique}", f"{name}-v1")
    wait_held(kube, name, f"{name}-v1")
    kube.apply_profile(profile_body(name, "cached"))
    # v2 is created first, v1 marked superseded right after: wait for both.
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1", f"{name}-v2"] and (
        kube.classes_of(name)[f"{name}-v1"].metadata.annotations or {}).get("mountwarden.io/superseded-by"),
        what="v1 kept beside v2, superseded")
    v1 = kube.classes_of(name)[f"{name}-v1"]
    assert v1.metadata.annotations["mountwarden.io/superseded-by"] == f"{name}-v2"
    assert v1.mount_options == STAGING
    history = wait_for(lambda: kube.profile(name)["status"].get("history") if len(
        kube.profile(name)["status"].get("history", [])) == 2 else None, what="history of two")
    assert history[0]["heldBy"] == [f"pv-{unique}"] and history[0]["supersededBy"] == f"{name}-v2"
    assert "mountwarden.io/superseded-by" not in (kube.classes_of(name)[f"{name}-v2"].metadata.annotations or {})

    kube.core.delete_persistent_volume(f"pv-{unique}")
    wait_for(lambda: class_names(kube, name) == [f"{name}-v2"], timeout=60, what="v1 swept once unused")
    wait_for(lambda: [h["storageClassName"] for h in kube.profile(name)["status"]["history"]] == [f"{name}-v2"],
             what="history without v1")


def test_invalid_spec_names_the_field_and_creates_no_class(kube, operator, unique):
    name = f"bad-{unique}"
    invalid = profile_body(name, "cached", mountOptions=["hard", "nconect=4"])
    # The webhook refuses this profile at admission; while it cannot answer (failurePolicy Ignore), the
    # profile is admitted, and then the reconciler must refuse it.
    with pytest.raises(kubernetes.client.ApiException, match="nconect"):
        kube.apply_profile(invalid)
    with operator.paused():
        kube.apply_profile(invalid)
    condition = wait_for(lambda: kube.condition(name, "Ready"), what="a Ready condition")
    assert condition["status"] == "False" and condition["reason"] == "InvalidSpec"
    assert "spec.mountOptions[1]" in condition["message"] and "Did you mean 'nconnect'" in condition["message"]
    assert class_names(kube, name) == []
    events = wait_for(lambda: [e for e in kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={name}").items if e.reason == "InvalidSpec"], what="InvalidSpec event")
    assert "spec.mountOptions[1]" in events[0].message

    # Fixing the spec recovers without any manual step.
    kube.apply_profile(profile_body(name, "cached", mountOptions=["hard", "nconnect=4"]))
    wait_for(lambda: ready(kube, name), what="Ready after the fix")
    assert class_names(kube, name) == [f"{name}-v1"]


def test_operator_restart_makes_no_duplicate_versions(kube, operator, unique):
    name = f"restart-{unique}"
    kube.apply_profile(profile_body(name, "staging"))
    wait_for(lambda: ready(kube, name), what="Ready")
    operator.restart(signal.SIGKILL)
    # A change made while the operator is down is picked up once, on resume.
    operator.stop(signal.SIGKILL)
    kube.apply_profile(profile_body(name, "cached"))
    operator.start()
    wait_for(lambda: class_names(kube, name) == [f"{name}-v2"], what="exactly v2 after restart")
    operator.restart()
    wait_for(lambda: kube.profile(name)["status"].get("version") == 2, what="status v2")
    assert class_names(kube, name) == [f"{name}-v2"]
    operator.assert_running()


def test_default_class_moves_to_the_newest_version(kube, operator, unique):
    name = f"default-{unique}"
    kube.apply_profile(profile_body(name, "staging", default=True))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1"], what="v1")
    default = "storageclass.kubernetes.io/is-default-class"
    assert kube.classes_of(name)[f"{name}-v1"].metadata.annotations[default] == "true"
    bound_pv(kube, f"pv-{unique}", f"{name}-v1")
    wait_held(kube, name, f"{name}-v1")
    kube.apply_profile(profile_body(name, "cached", default=True))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1", f"{name}-v2"], what="v2 beside v1")
    wait_for(lambda: default not in (kube.classes_of(name)[f"{name}-v1"].metadata.annotations or {}),
             what="default removed from v1")
    assert kube.classes_of(name)[f"{name}-v2"].metadata.annotations[default] == "true"
    kube.apply_profile(profile_body(name, "cached", default=False))
    wait_for(lambda: default not in (kube.classes_of(name)[f"{name}-v2"].metadata.annotations or {}),
             what="default removed when the profile stops being default")
    kube.core.delete_persistent_volume(f"pv-{unique}")


def test_deleting_a_profile_keeps_used_classes_orphaned(kube, operator, unique):
    name = f"gone-{unique}"
    kube.apply_profile(profile_body(name, "staging"))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1"], what="v1")
    bound_pv(kube, f"pv-{unique}", f"{name}-v1")
    wait_held(kube, name, f"{name}-v1")
    kube.apply_profile(profile_body(name, "cached"))
    wait_for(lambda: class_names(kube, name) == [f"{name}-v1", f"{name}-v2"], what="v1 and v2")
    kube.delete_profile(name)
    wait_for(lambda: kube.profile(name) is None, what="profile deleted (finalizer released)")
    assert class_names(kube, name) == [f"{name}-v1"]
    assert kube.classes_of(name)[f"{name}-v1"].metadata.labels["mountwarden.io/orphaned"] == "true"
    kube.core.delete_persistent_volume(f"pv-{unique}")
    kube.storage.delete_storage_class(f"{name}-v1")


def test_schema_rejects_what_it_can_before_the_operator_sees_it(kube, crds_installed, unique):
    body = profile_body(f"schema-{unique}", "lazy")
    with pytest.raises(kubernetes.client.ApiException) as raised:
        kube.apply_profile(body)
    assert raised.value.status == 422 and "spec.cachePolicy" in raised.value.body


def condition_owners(profile: dict) -> dict[str, list[tuple[str, str]]]:
    """Condition type -> the (field manager, operation) of every managedFields entry that owns it."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for entry in profile["metadata"].get("managedFields") or []:
        conditions = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions") or {}
        for key in conditions:
            if key.startswith("k:"):
                owners.setdefault(json.loads(key[2:])["type"], []).append((entry["manager"], entry["operation"]))
    return owners


def test_each_condition_is_applied_by_its_own_writer_and_no_other(kube, operator, unique):
    name = f"writers-{unique}"
    kube.apply_profile(profile_body(name, "coherent"))
    # Three writers: the reconciler, the compliance timer, the credit watch (an EFS backend is watched).
    wait_for(lambda: ready(kube, name) and kube.condition(name, "Compliant") and kube.condition(
        name, "CreditsDraining"), what="Ready, Compliant and CreditsDraining")
    writers = {"Ready": [("mountwarden-profiles", "Apply")], "Compliant": [("mountwarden-compliance", "Apply")],
               "CreditsDraining": [("mountwarden-credits", "Apply")]}
    assert condition_owners(kube.profile(name)) == writers

    # An invalid change (admitted while the webhook cannot answer): Ready turns False, and the last good class
    # stays in the status (an apply that left the class fields out would remove them); the other writer's
    # condition is untouched.
    with operator.paused():
        kube.apply_profile(profile_body(name, "coherent", mountOptions=["nconect=2"]))
    wait_for(lambda: (c := kube.condition(name, "Ready")) and c["reason"] == "InvalidSpec", what="InvalidSpec")
    body = kube.profile(name)
    assert body["status"]["storageClassName"] == f"{name}-v1" and body["status"]["version"] == 1
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]
    assert kube.condition(name, "Compliant") is not None
    assert condition_owners(body) == writers
    kube.delete_profile(name)
