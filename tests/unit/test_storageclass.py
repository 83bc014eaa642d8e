from mountwarden.api.storageprofile import StorageProfileSpec, desired_class
from mountwarden.core.storageclass import (
    DEFAULT_CLASS_ANNOTATION,
    HASH_ANNOTATION,
    ORPHANED_LABEL,
    PROFILE_LABEL,
    SUPERSEDED_BY_ANNOTATION,
    VERSION_LABEL,
    DesiredClass,
    ExistingClass,
    plan_classes,
    plan_release,
    version_history,
)


def desired(preset="cached", **backend):
    spec = StorageProfileSpec.model_validate(
        {
            "backend": {
                "provisioner": "efs.csi.aws.com",
                "parameters": {"fileSystemId": "fs-0123456789abcdef0"},
                **backend,
            },
            "cachePolicy": preset,
        }
    )
    return desired_class(spec, spec.resolve())


def existing(version, desired_class_, **kw):
    return ExistingClass(
        name=f"scratch-v{version}", version=version, content_hash=desired_class_.content_hash(), **kw
    )


def test_first_version_is_created_with_canonical_options_labels_and_hash():
    plan = plan_classes("scratch", desired(), [], make_default=False)
    body = plan.create
    assert (plan.current_name, plan.current_version) == ("scratch-v1", 1)
    assert body["metadata"]["labels"][PROFILE_LABEL] == "scratch"
    assert body["metadata"]["labels"][VERSION_LABEL] == "1"
    assert body["metadata"]["annotations"][HASH_ANNOTATION] == plan.content_hash
    assert body["mountOptions"] == [
        "vers=4.1",
        "rsize=1048576",
        "wsize=1048576",
        "hard",
        "timeo=600",
        "retrans=2",
        "noresvport",
        "acregmin=600",
        "acregmax=600",
        "acdirmin=600",
        "acdirmax=600",
        "lookupcache=all",
    ]
    assert body["parameters"] == {"fileSystemId": "fs-0123456789abcdef0"}
    assert body["reclaimPolicy"] == "Delete" and body["volumeBindingMode"] == "Immediate"
    assert "allowVolumeExpansion" not in body


def test_same_hash_is_reused_never_duplicated():
    want = desired()
    plan = plan_classes("scratch", want, [existing(1, want)], make_default=False)
    assert plan.create is None and plan.current_name == "scratch-v1" and not plan.changes_anything


def test_changed_policy_creates_next_version_and_deletes_unused_old():
    old, new = desired("coherent"), desired("cached")
    plan = plan_classes("scratch", new, [existing(1, old)], make_default=False)
    assert plan.current_name == "scratch-v2" and plan.create is not None
    assert plan.delete == ("scratch-v1",)


def test_old_version_held_by_a_volume_is_kept_and_superseded():
    old, new = desired("coherent"), desired("cached")
    plan = plan_classes("scratch", new, [existing(1, old, held_by=("pv-1",))], make_default=False)
    assert plan.delete == ()
    (patch,) = plan.patches
    assert patch.name == "scratch-v1" and patch.annotations == {SUPERSEDED_BY_ANNOTATION: "scratch-v2"}


def test_versions_keep_rising_after_old_classes_are_gone():
    plan = plan_classes("scratch", desired(), [], make_default=False, last_version=4)
    assert plan.current_name == "scratch-v5"


def test_rollback_makes_the_old_version_current_again():
    old, new = desired("coherent"), desired("cached")
    classes = [existing(1, old, held_by=("pv-1",), superseded_by="scratch-v2"), existing(2, new)]
    plan = plan_classes("scratch", old, classes, make_default=False)
    assert plan.create is None and plan.current_name == "scratch-v1"
    patches = {p.name: p for p in plan.patches}
    assert patches["scratch-v1"].annotations == {SUPERSEDED_BY_ANNOTATION: None}
    assert plan.delete == ("scratch-v2",)


def test_default_moves_to_the_newest_version():
    old, new = desired("coherent"), desired("cached")
    plan = plan_classes(
        "scratch", new, [existing(1, old, held_by=("pv-1",), is_default=True)], make_default=True
    )
    assert plan.create["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION] == "true"
    (patch,) = plan.patches
    assert patch.annotations == {SUPERSEDED_BY_ANNOTATION: "scratch-v2", DEFAULT_CLASS_ANNOTATION: None}


def test_default_flag_turned_off_and_on_in_place():
    want = desired()
    (patch,) = plan_classes("scratch", want, [existing(1, want, is_default=True)], make_default=False).patches
    assert patch.annotations == {DEFAULT_CLASS_ANNOTATION: None}
    (patch,) = plan_classes("scratch", want, [existing(1, want)], make_default=True).patches
    assert patch.annotations == {DEFAULT_CLASS_ANNOTATION: "true"}


def test_release_keeps_used_classes_orphaned_and_deletes_the_rest():
    want = desired()
    plan = plan_release([existing(1, want, held_by=("pv-1",)), existing(2, want)])
    assert plan.delete == ("scratch-v2",)
    assert plan.patches[0].body() == {"metadata": {"labels": {ORPHANED_LABEL: "true"}}}


def test_hash_covers_every_field_that_affects_new_volumes():
    base = desired()
    variants = [
        desired("coherent"),
        desired(reclaimPolicy="Retain"),
        desired(volumeBindingMode="WaitForFirstConsumer"),
        desired(allowVolumeExpansion=True),
        desired(parameters={"fileSystemId": "fs-99999999"}),
    ]
    hashes = {base.content_hash(), *(v.content_hash() for v in variants)}
    assert len(hashes) == 6


def test_hash_ignores_parameter_order():
    a = DesiredClass("p", {"a": "1", "b": "2"}, "Delete", "Immediate", None, ())
    b = DesiredClass("p", {"b": "2", "a": "1"}, "Delete", "Immediate", None, ())
    assert a.content_hash() == b.content_hash()


def test_from_object_reads_the_wire_form():
    body = desired().manifest("scratch", 3, default=True)
    body["metadata"]["creationTimestamp"] = "2026-11-30T12:00:00Z"
    cls = ExistingClass.from_object(body, held_by=["pv-b", "pv-a"])
    assert cls.version == 3 and cls.is_default and cls.held_by == ("pv-a", "pv-b")
    assert cls.content_hash == desired().content_hash()
    assert ExistingClass.from_object({"metadata": {"name": "x", "labels": {VERSION_LABEL: "?"}}}) is None


def test_history_lists_surviving_versions_oldest_first():
    old, new = desired("coherent"), desired("cached")
    classes = [existing(1, old, held_by=("pv-1",)), existing(2, desired("strict"))]
    plan = plan_classes("scratch", new, classes, make_default=False)
    history = version_history(classes, plan, new, now="2026-11-30T00:00:00Z")
    assert [h["storageClassName"] for h in history] == ["scratch-v1", "scratch-v3"]
    assert history[0]["supersededBy"] == "scratch-v3" and history[0]["heldBy"] == ["pv-1"]
    assert "supersededBy" not in history[1]
