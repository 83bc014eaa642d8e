"""Admission decisions on PVCs and StorageProfiles: every warning and denial, with its exact text."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mountwarden.core.admission import (
    Claim,
    ClassEntry,
    ClusterView,
    ProfileChange,
    ProfileEntry,
    consumer_keys,
    consumers_overlap,
    enforcing_profiles,
    is_network_provisioner,
    review_claim,
    review_profile,
)
from mountwarden.core.findings import Severity
from mountwarden.core.policy import SpecProblem, resolve_policy
from mountwarden.handlers.admission import profile_change

EFS = "efs.csi.aws.com"
IMPORTER_NS = {"team": "importer", "kubernetes.io/metadata.name": "importer"}


def importer(**overrides) -> ProfileEntry:
    fields = dict(
        name="importer-scratch", provisioner=EFS, namespace_selector={"matchLabels": {"team": "importer"}},
        cache_policy="cached", file_system_id="fs-0123456789abcdef0", storage_class_name="importer-scratch-v3",
    )
    return ProfileEntry(**{**fields, **overrides})


def lineage(profile: str, *versions: int, current: int, **current_fields) -> list[ClassEntry]:
    return [
        ClassEntry(f"{profile}-v{v}", EFS, profile=profile, version=v, content_hash=f"hash-{v}",
                   superseded_by=None if v == current else f"{profile}-v{current}",
                   **(current_fields if v == current else {}))
        for v in versions
    ]


def view(profiles=(), classes=(), namespaces=None, volumes=None, extra=()) -> ClusterView:
    """A ClusterView shaped like kopf's indexes: every key maps to a collection of entries."""
    classes = list(classes)
    by_profile: dict[str, list[ClassEntry]] = {}
    for cls in classes:
        if cls.profile:
            by_profile.setdefault(cls.profile, []).append(cls)
    by_consumer: dict[tuple, list[ProfileEntry]] = {}
    for profile in profiles:
        for key in consumer_keys(profile):
            by_consumer.setdefault(key, []).append(profile)
    return ClusterView(
        profiles={p.name: [p] for p in profiles},
        profiles_by_consumer=by_consumer,
        classes={c.name: [c] for c in classes},
        classes_by_profile=by_profile,
        default_classes=[c for c in classes if c.is_default],
        namespace_labels={name: [labels] for name, labels in (namespaces or {"importer": IMPORTER_NS}).items()},
        volumes_by_class=volumes or {},
        extra_network_provisioners=extra,
    )


def claim(storage_class: str | None = "importer-scratch-v3", *, namespace="importer", name="db", labels=None,
          annotations=None) -> Claim:
    return Claim(namespace, name, storage_class, labels or {}, annotations or {})


# -- PVCs ---------------------------------------------------------------------------------------------


def test_a_pvc_on_its_profiles_current_class_gets_no_finding():
    cluster = view([importer()], lineage("importer-scratch", 2, 3, current=3))
    assert review_claim(claim(), cluster).findings == ()


def test_superseded_class_names_its_successor_and_profile():
    cluster = view([importer()], lineage("importer-scratch", 2, 3, current=3))
    review = review_claim(claim("importer-scratch-v2"), cluster)
    assert review.warnings == [
        "StorageClass importer-scratch-v2 is superseded by importer-scratch-v3 (StorageProfile importer-scratch)"
    ]
    assert review.denial is None


def test_consumer_asking_for_an_ungoverned_class_is_told_which_class_to_use():
    cluster = view([importer()], [*lineage("importer-scratch", 3, current=3), ClassEntry("gp3", "ebs.csi.aws.com")])
    assert review_claim(claim("gp3"), cluster).warnings == [
        "PVC importer/db is a consumer of StorageProfile importer-scratch but asks for StorageClass gp3: "
        "use storageClassName importer-scratch-v3"
    ]


def test_consumer_asking_for_another_profiles_class_names_both_profiles():
    other = ProfileEntry("shared", EFS, storage_class_name="shared-v1")
    cluster = view([importer(), other], [*lineage("importer-scratch", 3, current=3), *lineage("shared", 1, current=1)])
    assert review_claim(claim("shared-v1"), cluster).warnings == [
        "PVC importer/db is a consumer of StorageProfile importer-scratch but asks for StorageClass shared-v1 "
        "of StorageProfile shared: use storageClassName importer-scratch-v3"
    ]


def test_consumer_asking_for_no_class_at_all():
    cluster = view([importer()], lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(""), cluster).warnings == [
        "PVC importer/db is a consumer of StorageProfile importer-scratch but asks for no StorageClass: "
        "use storageClassName importer-scratch-v3"
    ]


def test_a_profile_not_yet_reconciled_points_at_its_status():
    cluster = view([importer(storage_class_name=None)], [ClassEntry("gp3", "ebs.csi.aws.com")])
    assert review_claim(claim("gp3"), cluster).warnings == [
        "PVC importer/db is a consumer of StorageProfile importer-scratch but asks for StorageClass gp3: "
        "use the class in StorageProfile importer-scratch's status once it is Ready"
    ]


def test_deny_profile_turns_the_mismatch_into_a_denial_with_the_same_message():
    cluster = view([importer(enforcement="deny")], [ClassEntry("gp3", "ebs.csi.aws.com")])
    review = review_claim(claim("gp3"), cluster)
    assert review.warnings == []
    assert review.denial == (
        "PVC importer/db is a consumer of StorageProfile importer-scratch but asks for StorageClass gp3: "
        "use storageClassName importer-scratch-v3"
    )


def test_consumers_need_both_selectors_to_match():
    profile = importer(pvc_selector={"matchLabels": {"app": "importer"}})
    cluster = view([profile], [ClassEntry("gp3", "ebs.csi.aws.com")])
    assert review_claim(claim("gp3"), cluster).findings == ()
    assert len(review_claim(claim("gp3", labels={"app": "importer"}), cluster).findings) == 1
    assert review_claim(claim("gp3", namespace="web", labels={"app": "importer"}), cluster).findings == ()


def test_a_profile_without_consumers_governs_no_pvc_by_selection():
    cluster = view([importer(namespace_selector=None)], [ClassEntry("gp3", "ebs.csi.aws.com")])
    assert review_claim(claim("gp3"), cluster).findings == ()


def test_an_explicit_empty_selector_governs_every_pvc():
    cluster = view([importer(namespace_selector={})], [ClassEntry("gp3", "ebs.csi.aws.com")],
                   namespaces={"web": {}})
    assert len(review_claim(claim("gp3", namespace="web"), cluster).findings) == 1


def test_a_pvc_two_profiles_govern_may_pick_either():
    second = importer(name="importer-fast", storage_class_name="importer-fast-v1", enforcement="deny")
    cluster = view([importer(), second], [*lineage("importer-scratch", 3, current=3),
                                           *lineage("importer-fast", 1, current=1)])
    assert review_claim(claim("importer-fast-v1"), cluster).findings == ()
    review = review_claim(claim("gp3"), cluster)
    assert [f.severity is Severity.ERROR for f in review.findings] == [True, False]  # denied, warned; by name
    assert review.denial.startswith("PVC importer/db is a consumer of StorageProfile importer-fast ")


def test_the_current_class_counts_before_its_storageclass_is_indexed():
    cluster = view([importer(enforcement="deny")], [])
    assert review_claim(claim("importer-scratch-v3"), cluster).findings == ()


def test_ungoverned_network_class_is_named_with_its_provisioner():
    cluster = view([], [ClassEntry("efs-sc", EFS)], namespaces={"web": {}})
    assert review_claim(claim("efs-sc", namespace="web"), cluster).warnings == [
        "StorageClass efs-sc is NFS (efs.csi.aws.com) but no StorageProfile governs it: "
        "use a StorageProfile's class, or create a profile for it"
    ]


def test_ungoverned_local_class_is_none_of_mountwardens_business():
    cluster = view([], [ClassEntry("local-path", "rancher.io/local-path")], namespaces={"web": {}})
    assert review_claim(claim("local-path", namespace="web"), cluster).findings == ()


def test_a_class_of_a_deleted_profile_is_ungoverned():
    orphan = ClassEntry("gone-v1", EFS, profile="gone", version=1)
    cluster = view([], [orphan], namespaces={"web": {}})
    assert review_claim(claim("gone-v1", namespace="web"), cluster).warnings == [
        "StorageClass gone-v1 is NFS (efs.csi.aws.com) but no StorageProfile governs it: "
        "use a StorageProfile's class, or create a profile for it"
    ]


@pytest.mark.parametrize("provisioner", [
    "efs.csi.aws.com", "nfs.csi.k8s.io", "fsx.openzfs.csi.aws.com", "filestore.csi.storage.gke.io",
    "kubernetes.io/nfs", "example.com/nfs", "k8s-sigs.io/nfs-subdir-external-provisioner",
    "cluster.local/NFS-client",
])
def test_network_provisioners(provisioner):
    assert is_network_provisioner(provisioner)


@pytest.mark.parametrize("provisioner", [
    "ebs.csi.aws.com", "fsx.csi.aws.com", "rancher.io/local-path", "confs.example.com", "nfsish.io/x",
])
def test_not_network_provisioners(provisioner):
    assert not is_network_provisioner(provisioner)


def test_configured_network_provisioners_count_too():
    assert is_network_provisioner("csi.trident.netapp.io", extra=["csi.trident.netapp.io"])
    cluster = view([], [ClassEntry("ontap", "csi.trident.netapp.io")], namespaces={"web": {}},
                   extra=["csi.trident.netapp.io"])
    assert len(review_claim(claim("ontap", namespace="web"), cluster).warnings) == 1


SQLITE_WARNING = ("PVC importer/db holds SQLite but StorageClass importer-scratch-v3 is NFS: WAL is impossible and "
                  "every lock is a network round trip; use a local volume")


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_sqlite_on_nfs_suggests_a_local_volume(where):
    cluster = view([importer()], lineage("importer-scratch", 3, current=3))
    review = review_claim(claim(**{where: {"mountwarden.io/contents": "sqlite"}}), cluster)
    assert review.warnings == [SQLITE_WARNING]


def test_sqlite_allowed_by_the_profile_is_not_mentioned():
    cluster = view([importer(sqlite="allow")], lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(annotations={"mountwarden.io/contents": "sqlite"}), cluster).findings == ()


@pytest.mark.parametrize(("sqlite", "enforcement", "denied"), [
    ("forbid", "deny", True), ("forbid", "warn", False), ("warn", "deny", False),
])
def test_sqlite_is_denied_only_when_forbidden_and_enforced(sqlite, enforcement, denied):
    cluster = view([importer(sqlite=sqlite, enforcement=enforcement)], lineage("importer-scratch", 3, current=3))
    review = review_claim(claim(labels={"mountwarden.io/contents": "sqlite"}), cluster)
    assert (review.denial, review.warnings) == ((SQLITE_WARNING, []) if denied else (None, [SQLITE_WARNING]))


def test_sqlite_on_a_local_class_is_fine():
    cluster = view([], [ClassEntry("local-path", "rancher.io/local-path")], namespaces={"web": {}})
    annotated = claim("local-path", namespace="web", annotations={"mountwarden.io/contents": "sqlite"})
    assert review_claim(annotated, cluster).findings == ()


def test_other_contents_are_not_sqlite():
    cluster = view([importer()], lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(labels={"mountwarden.io/contents": "postgres"}), cluster).findings == ()


def warning_for(options: str, what: str, where: str = "EFS fs-0123456789abcdef0") -> str:
    return (f"StorageProfile importer-scratch: on Bursting {where} its effective options {options} make {what}, "
            "each metered as at least 4 KiB on EFS (EFS User Guide, 'Amazon EFS performance specifications') and "
            "paid from the burst credits meant for data "
            "(sync,actimeo=0,lookupcache=none made the incident's import take 8 hours); use cachePolicy staging for "
            "data several clients change (1 GETATTR per stat(), never stale: kernel lab), cached where others' "
            "changes may show up to 10 minutes late, or Elastic throughput")


METADATA = ("every stat() and open() a round trip per path component (5 for a file two directories down: "
            "kernel lab)")
WRITES = "every write() wait for the server (nfs(5))"


def resolved(cache_policy, *mount_options):
    return resolve_policy(provisioner=EFS, cache_policy=cache_policy, mount_options=mount_options).options


def test_strict_on_bursting_efs_warns():
    cluster = view([importer(cache_policy="strict", throughput_mode="bursting", effective_options=resolved("strict"))],
                   lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(), cluster).warnings == [warning_for("actimeo=0, lookupcache=none", METADATA)]


def test_strict_on_bursting_efs_without_a_known_file_system():
    cluster = view([importer(cache_policy="strict", throughput_mode="bursting", file_system_id=None)],
                   lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(), cluster).warnings == [warning_for("actimeo=0, lookupcache=none", METADATA, "EFS")]


@pytest.mark.parametrize(("mount_options", "named", "what"), [
    # The incident's flags, under a preset that promises caching: the effective options decide, not the name.
    (("sync", "actimeo=0", "lookupcache=none"), "sync, actimeo=0, lookupcache=none", f"{METADATA} and {WRITES}"),
    (("noac",), "sync, actimeo=0", f"{METADATA} and {WRITES}"),
    (("sync",), "sync", WRITES),
    (("acdirmax=0",), "acdirmax=0", METADATA),
])
def test_costly_effective_options_warn_whatever_the_preset(mount_options, named, what):
    cluster = view([importer(cache_policy="cached", throughput_mode="bursting",
                             effective_options=resolved("cached", *mount_options))],
                   lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(), cluster).warnings == [warning_for(named, what)]


@pytest.mark.parametrize(("cache_policy", "mode", "provisioner"), [
    ("strict", None, EFS),  # the credit watch has not said yet: unknown, no warning
    ("strict", "elastic", EFS),
    ("strict", "provisioned", EFS),
    ("staging", "bursting", EFS),  # one GETATTR per stat(): the price of never being stale
    ("cached", "bursting", EFS),
    ("strict", "bursting", "nfs.csi.k8s.io"),
])
def test_strict_warning_needs_costly_options_bursting_and_efs(cache_policy, mode, provisioner):
    cluster = view([importer(cache_policy=cache_policy, throughput_mode=mode, provisioner=provisioner,
                             effective_options=resolved(cache_policy))],
                   lineage("importer-scratch", 3, current=3))
    assert review_claim(claim(), cluster).findings == ()


DEFAULT_WARNING = ("PVC web/cache gets the default StorageClass shared-v1, but StorageProfile shared does not govern it: "
                   "set spec.storageClassName")


def shared_default() -> tuple[ProfileEntry, list[ClassEntry]]:
    profile = ProfileEntry("shared", EFS, namespace_selector={"matchLabels": {"team": "platform"}},
                           storage_class_name="shared-v1")
    return profile, lineage("shared", 1, current=1, is_default=True, created_at="2026-01-01T00:00:00Z")


@pytest.mark.parametrize("storage_class", [None, "shared-v1"])  # the API server fills in the default before us
def test_default_class_of_a_profile_that_does_not_govern_the_pvc(storage_class):
    profile, classes = shared_default()
    cluster = view([profile], classes, namespaces={"web": {}})
    assert review_claim(claim(storage_class, namespace="web", name="cache"), cluster).warnings == [DEFAULT_WARNING]


def test_default_class_of_a_profile_that_governs_the_pvc():
    profile, classes = shared_default()
    cluster = view([profile], classes, namespaces={"ops": {"team": "platform"}})
    assert review_claim(claim(None, namespace="ops"), cluster).findings == ()


def test_default_class_of_a_profile_without_consumers():
    profile, classes = shared_default()
    cluster = view([ProfileEntry("shared", EFS, storage_class_name="shared-v1")], classes, namespaces={"web": {}})
    assert review_claim(claim(None, namespace="web"), cluster).findings == ()


def test_a_consumer_of_another_profile_gets_one_line_not_two():
    profile, classes = shared_default()
    cluster = view([profile, importer()], [*classes, *lineage("importer-scratch", 3, current=3)])
    assert review_claim(claim(None), cluster).warnings == [
        "PVC importer/db is a consumer of StorageProfile importer-scratch but asks for StorageClass shared-v1 "
        "of StorageProfile shared: use storageClassName importer-scratch-v3"
    ]


def test_with_several_default_classes_the_newest_wins():
    older = ClassEntry("old", "rancher.io/local-path", is_default=True, created_at="2025-01-01T00:00:00Z")
    newer = ClassEntry("efs-sc", EFS, is_default=True, created_at="2026-01-01T00:00:00Z")
    cluster = view([], [older, newer], namespaces={"web": {}})
    assert cluster.default_class() == newer
    assert review_claim(claim(None, namespace="web"), cluster).warnings == [
        "StorageClass efs-sc is NFS (efs.csi.aws.com) but no StorageProfile governs it: "
        "use a StorageProfile's class, or create a profile for it"
    ]


def test_findings_come_together_in_one_review():
    cluster = view([importer(enforcement="deny", sqlite="forbid")], [ClassEntry("efs-sc", EFS)])
    review = review_claim(claim("efs-sc", annotations={"mountwarden.io/contents": "sqlite"}), cluster)
    assert review.warnings == [
        "StorageClass efs-sc is NFS (efs.csi.aws.com) but no StorageProfile governs it: "
        "use a StorageProfile's class, or create a profile for it",
        "PVC importer/db holds SQLite but StorageClass efs-sc is NFS: WAL is impossible and every lock is a "
        "network round trip; use a local volume",
    ]
    # The class is ungoverned, so the profile's sqlite: forbid does not apply; its consumer rule does.
    assert review.denial == ("PVC importer/db is a consumer of StorageProfile importer-scratch but asks for "
                             "StorageClass efs-sc: use storageClassName importer-scratch-v3")


def test_claim_from_its_wire_form():
    parsed = Claim.from_object({
        "metadata": {"namespace": "importer", "name": "db", "labels": {"a": "b"},
                     "annotations": {"mountwarden.io/contents": "sqlite"}},
        "spec": {"storageClassName": "x"},
    })
    assert parsed == Claim("importer", "db", "x", {"a": "b"}, {"mountwarden.io/contents": "sqlite"})
    assert parsed.holds_sqlite
    assert Claim.from_object({"metadata": {"namespace": "n", "generateName": "data-"}, "spec": {}}).name == "data-*"


def test_class_entry_from_its_wire_form():
    entry = ClassEntry.from_object({
        "metadata": {
            "name": "importer-scratch-v2", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"mountwarden.io/profile": "importer-scratch", "mountwarden.io/version": "2"},
            "annotations": {"mountwarden.io/superseded-by": "importer-scratch-v3",
                            "mountwarden.io/options-hash": "abc",
                            "storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": EFS,
    })
    assert entry == ClassEntry("importer-scratch-v2", EFS, profile="importer-scratch", version=2,
                               superseded_by="importer-scratch-v3", is_default=True, content_hash="abc",
                               created_at="2026-01-01T00:00:00Z")
    assert ClassEntry.from_object({"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"}) == \
        ClassEntry("gp3", "ebs.csi.aws.com")


# -- StorageProfiles ----------------------------------------------------------------------------------


def change_for(wire_spec: dict, *, name="importer-scratch", status=None, updating=True) -> ProfileChange:
    """What the webhook handler reads from a request's object."""
    return profile_change(name, {"spec": wire_spec, "status": status or {}}, updating=updating)


def efs_spec(cache_policy="cached", **fields) -> dict:
    return {"backend": {"provisioner": EFS, "parameters": {"fileSystemId": "fs-0123456789abcdef0"}},
            "cachePolicy": cache_policy, **fields}


def test_invalid_options_deny_and_list_their_field_paths():
    change = change_for(efs_spec(mountOptions=["hard", "nconect=4"]))
    review = review_profile(change, view())
    assert review.warnings == []
    assert review.denial.startswith("StorageProfile importer-scratch is invalid: spec.mountOptions[1]: ")
    assert "Did you mean 'nconnect'?" in review.denial


def test_contradictions_between_preset_required_and_forbidden_deny():
    change = change_for(efs_spec("cached", requiredOptions=["lookupcache=none"], forbiddenOptions=["acregmin"]))
    denial = review_profile(change, view()).denial
    assert denial.startswith("StorageProfile importer-scratch is invalid: spec.requiredOptions[0]: 'lookupcache=none' "
                             "is required, but the effective options (lookupcache=all) contradict it")
    assert denial.endswith("; spec.forbiddenOptions[0]: 'acregmin' is forbidden, but the effective options set "
                           "acregmin=600: change the preset or spec.mountOptions, or lift the ban.")


def test_schema_problems_deny_with_their_paths():
    change = ProfileChange(ProfileEntry("p", ""), errors=[SpecProblem("spec.backend.provisioner", "Field required")])
    assert review_profile(change, view()).denial == "StorageProfile p is invalid: spec.backend.provisioner: Field required"


def test_option_warnings_are_passed_on_with_the_profile_name():
    change = ProfileChange(importer(), warnings=[SpecProblem("spec.mountOptions[0]", "soft can corrupt data")])
    assert review_profile(change, view()).warnings == [
        "StorageProfile importer-scratch: spec.mountOptions[0]: soft can corrupt data"
    ]


OVERLAP = ("StorageProfile importer-scratch: spec.consumers overlaps those of StorageProfile {other}: a PVC matching "
           "both gets two contracts; narrow one of the selectors")


def test_overlapping_consumers_warn_naming_both_profiles():
    other = importer(name="importer-fast", pvc_selector={"matchLabels": {"app": "db"}})
    review = review_profile(ProfileChange(importer(), updating=False), view([other]))
    assert review.warnings == [OVERLAP.format(other="importer-fast")]


def test_a_profile_does_not_overlap_itself():
    assert review_profile(ProfileChange(importer()), view([importer()])).findings == ()


@pytest.mark.parametrize(("a", "b", "overlap"), [
    # (namespaceSelector, pvcSelector) of each profile
    (({}, None), ({}, None), True),  # both select everything
    (({"matchLabels": {"team": "a"}}, None), ({"matchLabels": {"team": "a"}}, None), True),  # identical
    (({"matchLabels": {"team": "a"}}, None), ({"matchLabels": {"team": "a", "tier": "x"}}, None), True),  # subset
    (({"matchLabels": {"team": "a"}}, None), (None, {"matchLabels": {"app": "db"}}), True),  # one per dimension
    (({"matchLabels": {"team": "a"}}, None), ({"matchLabels": {"team": "b"}}, None), False),
    (({"matchLabels": {"team": "a"}}, None), ({"matchLabels": {"env": "prod"}}, None), False),  # intersect only
    (({"matchExpressions": [{"key": "team", "operator": "In", "values": ["b", "a"]}]}, None),
     ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, None), True),
    (({"matchLabels": {"team": "a"}}, None),
     ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, None), True),  # same requirement
    ((None, None), ({}, None), False),  # no consumers declared: governs nobody
])
def test_overlap_rule(a, b, overlap):
    first = ProfileEntry("a", EFS, namespace_selector=a[0], pvc_selector=a[1])
    second = ProfileEntry("b", EFS, namespace_selector=b[0], pvc_selector=b[1])
    assert consumers_overlap(first, second) is overlap
    assert consumers_overlap(second, first) is overlap


def test_a_change_of_options_makes_a_new_version_and_counts_the_volumes_left_behind():
    classes = lineage("importer-scratch", 2, 3, current=3)
    cluster = view(classes=classes, volumes={"importer-scratch-v2": ["pv-a"], "importer-scratch-v3": ["pv-b", "pv-c"]})
    change = change_for(efs_spec("staging"), status={"storageClassName": "importer-scratch-v3", "version": 3})
    assert review_profile(change, cluster).warnings == [
        "StorageProfile importer-scratch: this change makes a new StorageClass importer-scratch-v4; "
        "3 bound PersistentVolumes keep their old mount options until remounted"
    ]


def test_a_change_that_weakens_coherence_says_who_loses_what_before_anything_moves():
    # staging (stat() never stale, new names seen at once: kernel lab) to cached (600 s both ways).
    staging = resolve_policy(provisioner=EFS, cache_policy="staging").mount_options
    classes = lineage("uploads", 1, current=1)
    cluster = view(classes=classes, volumes={"uploads-v1": ["pv-a", "pv-b"]})
    change = change_for(efs_spec("cached"), name="uploads", status={
        "storageClassName": "uploads-v1", "version": 1, "effectiveMountOptions": staging})
    (warning,) = review_profile(change, cluster).warnings
    assert warning == (
        "StorageProfile uploads: this change makes a new StorageClass uploads-v2; 2 bound PersistentVolumes keep "
        "their old mount options until remounted; their consumers lose freshness once remounted: stat() by path up "
        "to 600 s stale instead of never; a file another client creates missing for up to 600 s instead of seen at "
        "once (nfs(5); kernel lab). Find who relies on it before approving (mountwarden plan uploads names them)")
    # The other way round nothing gets staler: no such sentence.
    back = change_for(efs_spec("staging"), name="uploads", status={
        "storageClassName": "uploads-v1", "version": 1,
        "effectiveMountOptions": resolve_policy(provisioner=EFS, cache_policy="cached").mount_options})
    assert "lose freshness" not in review_profile(back, cluster).warnings[0]


def test_one_volume_left_behind_is_said_in_the_singular():
    classes = lineage("importer-scratch", 1, current=1)
    cluster = view(classes=classes, volumes={"importer-scratch-v1": ["pv-a"]})
    change = change_for(efs_spec("staging"), status={"storageClassName": "importer-scratch-v1", "version": 1})
    assert review_profile(change, cluster).warnings == [
        "StorageProfile importer-scratch: this change makes a new StorageClass importer-scratch-v2; "
        "1 bound PersistentVolume keeps its old mount options until remounted"
    ]


def test_version_numbers_keep_rising_past_deleted_versions():
    cluster = view(classes=lineage("importer-scratch", 3, current=3))
    change = change_for(efs_spec("staging"), status={"storageClassName": "importer-scratch-v3", "version": 7})
    assert review_profile(change, cluster).warnings == [
        "StorageProfile importer-scratch: this change makes a new StorageClass importer-scratch-v8; "
        "0 bound PersistentVolumes keep their old mount options until remounted"
    ]


def test_going_back_to_an_older_version_says_so():
    old_spec, new_spec = efs_spec("staging"), efs_spec("cached")
    old_hash = change_for(old_spec).desired.content_hash()
    classes = [ClassEntry("importer-scratch-v1", EFS, profile="importer-scratch", version=1, content_hash=old_hash,
                          superseded_by="importer-scratch-v2"),
               ClassEntry("importer-scratch-v2", EFS, profile="importer-scratch", version=2,
                          content_hash=change_for(new_spec).desired.content_hash())]
    cluster = view(classes=classes, volumes={"importer-scratch-v2": ["pv-a"]})
    change = change_for(old_spec, status={"storageClassName": "importer-scratch-v2", "version": 2})
    assert review_profile(change, cluster).warnings == [
        "StorageProfile importer-scratch: this change makes StorageClass importer-scratch-v1 current again; "
        "1 bound PersistentVolume keeps its old mount options until remounted"
    ]


def test_a_change_that_keeps_the_class_content_says_nothing():
    spec = efs_spec("cached")
    classes = [ClassEntry("importer-scratch-v1", EFS, profile="importer-scratch", version=1,
                          content_hash=change_for(spec).desired.content_hash())]
    change = change_for({**spec, "enforcement": "deny"}, status={"storageClassName": "importer-scratch-v1"})
    assert review_profile(change, view(classes=classes)).findings == ()


def test_creating_a_profile_makes_version_one_without_a_warning():
    cluster = view(classes=lineage("importer-scratch", 1, current=1))
    assert review_profile(change_for(efs_spec("staging"), updating=False), cluster).findings == ()


def test_enforcing_profiles_are_the_deny_profiles_that_declare_consumers():
    profiles = [importer(name="b", enforcement="deny"), importer(name="a", enforcement="deny"),
                importer(name="c"), importer(name="d", enforcement="deny", namespace_selector=None)]
    assert [p.name for p in enforcing_profiles(profiles)] == ["a", "b"]


def test_a_deprecated_preset_is_accepted_with_a_warning_that_names_its_replacement():
    classes = lineage("importer-scratch", 3, current=3)
    cluster = view(classes=classes, volumes={"importer-scratch-v3": ["pv-b"]})
    change = change_for(efs_spec("coherent"), status={"storageClassName": "importer-scratch-v3", "version": 3})
    review = review_profile(change, cluster)
    assert review.denial is None
    deprecated, version = review.warnings
    assert deprecated.startswith("StorageProfile importer-scratch: spec.cachePolicy: cachePolicy coherent is "
                                 "deprecated: its options (cto,lookupcache=positive,acregmax=3")
    assert "It now means staging (acregmin=0,acregmax=0,lookupcache=positive,cto): write cachePolicy: staging" in deprecated
    assert "spec.rollout decides when its bound volumes are mounted with them" in deprecated
    assert version == ("StorageProfile importer-scratch: this change makes a new StorageClass importer-scratch-v4; "
                       "1 bound PersistentVolume keeps its old mount options until remounted")


# -- the profiles a PVC review tries ------------------------------------------------------------------


LABEL_KEYS = ["app", "team", "tier"]
LABEL_VALUES = ["a", "b", ""]
label_sets = st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=3)
expressions = st.fixed_dictionaries({
    "key": st.sampled_from(LABEL_KEYS),
    "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    "values": st.lists(st.sampled_from(LABEL_VALUES), max_size=2),
})
#: None (no selector), {} (every one), or matchLabels and/or expressions over a few keys and values.
selectors = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "matchLabels": label_sets, "matchExpressions": st.lists(expressions, max_size=3)}))
profile_lists = st.lists(st.builds(ProfileEntry, name=st.uuids().map(str), provisioner=st.just(EFS),
                                   namespace_selector=selectors, pvc_selector=selectors), max_size=8)


@settings(max_examples=500, deadline=None)
@given(profile_lists, label_sets, label_sets)
def test_the_keyed_lookup_of_profiles_finds_exactly_what_a_full_scan_finds(entries, namespace_labels, pvc_labels):
    """A PVC review looks only at the profiles filed under its labels (profiles_by_consumer): never fewer or more."""
    keyed = view(entries, namespaces={"ns": namespace_labels})
    scanning = dataclasses.replace(keyed, profiles_by_consumer=None)  # None: try every profile
    found = keyed.governing(namespace_labels, pvc_labels)
    assert found == scanning.governing(namespace_labels, pvc_labels)
    assert found == sorted((p for p in entries if p.governs(namespace_labels, pvc_labels)), key=lambda p: p.name)
