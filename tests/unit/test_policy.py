import pytest

from mountwarden.core.explain import explain
from mountwarden.core.policy import resolve_policy
from mountwarden.core.presets import EFS_BASELINE, PRESETS, CachePolicy

EFS = "efs.csi.aws.com"


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        (
            "strict",
            "vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,"
            "acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,lookupcache=none",
        ),
        (
            "coherent",
            "vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,"
            "acregmax=3,lookupcache=positive,cto",
        ),
        (
            "cached",
            "vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,"
            "acregmin=600,acregmax=600,acdirmin=600,acdirmax=600,lookupcache=all",
        ),
        (
            "read-only",
            "ro,vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,"
            "acregmin=600,acregmax=600,acdirmin=600,acdirmax=600,lookupcache=all,nocto",
        ),
    ],
)
def test_presets_on_the_efs_baseline(preset, expected):
    policy = resolve_policy(provisioner=EFS, cache_policy=preset)
    assert policy.valid and ",".join(policy.mount_options) == expected


def test_presets_without_efs_have_no_baseline():
    policy = resolve_policy(provisioner="nfs.csi.k8s.io", cache_policy="coherent")
    assert policy.mount_options == ["acregmax=3", "lookupcache=positive", "cto"]


def test_every_preset_documents_staleness_and_cost():
    assert set(PRESETS) == set(CachePolicy)
    for preset in PRESETS.values():
        assert preset.staleness and preset.cost and preset.use_for


def test_baseline_is_what_aws_recommends():
    assert EFS_BASELINE == (
        "vers=4.1",
        "rsize=1048576",
        "wsize=1048576",
        "hard",
        "timeo=600",
        "retrans=2",
        "noresvport",
    )


def test_overrides_replace_preset_values():
    policy = resolve_policy(
        provisioner=EFS, cache_policy="cached", mount_options=["acregmax=30", "nconnect=4"]
    )
    assert (
        policy.options["acregmax"] == 30
        and policy.options["acregmin"] == 600
        and policy.options["nconnect"] == 4
    )


def test_override_errors_point_at_the_entry():
    policy = resolve_policy(provisioner=EFS, cache_policy="cached", mount_options=["hard", "nconect=4"])
    (error,) = policy.errors
    assert error.field == "spec.mountOptions[1]" and "Did you mean 'nconnect'" in error.message


def test_contradiction_across_entries_is_an_error():
    policy = resolve_policy(provisioner=EFS, cache_policy=None, mount_options=["hard", "soft"])
    assert [e.field for e in policy.errors] == ["spec.mountOptions"]


def test_required_option_contradicted_by_preset():
    policy = resolve_policy(provisioner=EFS, cache_policy="read-only", required_options=["cto"])
    (error,) = policy.errors
    assert error.field == "spec.requiredOptions[0]" and "nocto" in error.message


def test_forbidden_option_set_by_preset():
    policy = resolve_policy(provisioner=EFS, cache_policy="strict", forbidden_options=["actimeo=0"])
    (error,) = policy.errors
    assert error.field == "spec.forbiddenOptions[0]" and "acregmin=0" in error.message


def test_forbidden_unknown_option_is_an_error():
    policy = resolve_policy(provisioner=EFS, cache_policy="cached", forbidden_options=["nolok"])
    (error,) = policy.errors
    assert error.field == "spec.forbiddenOptions[0]" and "Did you mean 'nolock'" in error.message


def test_unknown_cache_policy():
    policy = resolve_policy(provisioner=EFS, cache_policy="lazy")
    assert policy.errors[0].field == "spec.cachePolicy"


def test_warnings_are_located_but_not_errors():
    policy = resolve_policy(provisioner=EFS, cache_policy="cached", mount_options=["rsize=1000000"])
    assert policy.valid and policy.warnings[0].field == "spec.mountOptions[0]"


def test_explain_says_why_sync_does_not_refresh_other_clients():
    (sync,) = explain("sync")
    assert "does not refresh another client's cache" in sync.consequence


def test_explain_says_noac_implies_sync():
    (noac,) = explain("noac")
    assert "synchronous" in noac.consequence and noac.option == "ac"


def test_explain_actimeo_zero_costs_a_round_trip_per_stat():
    (item,) = explain("actimeo=0")
    assert "GETATTR round trip" in item.consequence and "4 KiB" in item.consequence


def test_explain_unknown_and_helper_options():
    unknown, tls = explain("nconect=2,tls")
    assert not unknown.known and "nconnect" in unknown.meaning
    assert "Never shown in the mount table" in tls.consequence


def test_forbidding_actimeo_by_name_catches_the_preset_that_sets_it():
    policy = resolve_policy(provisioner=EFS, cache_policy="cached", forbidden_options=["actimeo"])
    (error,) = policy.errors
    assert error.field == "spec.forbiddenOptions[0]" and "acregmin=600" in error.message


def test_a_requirement_is_one_error_however_many_options_it_stands_for():
    policy = resolve_policy(provisioner=EFS, cache_policy="cached", required_options=["actimeo=0"])
    (error,) = policy.errors
    assert "acregmin=600,acregmax=600,acdirmin=600,acdirmax=600" in error.message
