import pytest

from mountwarden.core.options.explain import explain
from mountwarden.core.options.presets import DEPRECATED, EFS_BASELINE, PRESETS, CachePolicy
from mountwarden.core.policy import backend_kind, resolve_policy

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
            "staging",
            "vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,"
            "acregmin=0,acregmax=0,lookupcache=positive,cto",
        ),
        (  # deprecated: the staging options
            "coherent",
            "vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,"
            "acregmin=0,acregmax=0,lookupcache=positive,cto",
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
    policy = resolve_policy(provisioner="nfs.csi.k8s.io", cache_policy="staging")
    assert policy.mount_options == ["acregmin=0", "acregmax=0", "lookupcache=positive", "cto"]


def test_every_preset_states_its_whole_promise():
    assert set(PRESETS) | set(DEPRECATED) == set(CachePolicy)
    for preset in PRESETS.values():
        promise = preset.promise
        assert preset.use_for and preset.not_for
        for claim in (promise.stat_by_path, promise.open_after_close, promise.new_files, promise.cost):
            # Every claim about the kernel names its source.
            assert "kernel lab" in claim or "nfs(5)" in claim, (preset.name, claim)


def test_no_preset_is_offered_for_sqlite_or_small_file_trees():
    assert len(PRESETS) >= 4
    for preset in PRESETS.values():
        assert "sqlite" not in preset.use_for.lower() and "build" not in preset.use_for.lower(), preset.name
        assert "SQLite" in preset.not_for, preset.name


def test_a_deprecated_preset_means_its_replacement_and_says_so():
    policy = resolve_policy(provisioner=EFS, cache_policy="coherent")
    replacement = resolve_policy(provisioner=EFS, cache_policy="staging")
    assert policy.options == replacement.options and policy.valid
    (warning,) = policy.warnings
    assert warning.field == "spec.cachePolicy" and "deprecated" in warning.message
    assert "write cachePolicy: staging" in warning.message


def test_an_unknown_preset_lists_only_current_names():
    (error,) = resolve_policy(provisioner=EFS, cache_policy="fast").errors
    assert error.message == "unknown cache policy 'fast': use one of strict, staging, cached, read-only."


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


# -- backend kinds ----------------------------------------------------------------------------------

GATEWAY = "nfs.csi.k8s.io"


def gateway(*mount_options, cache_policy="read-only", sqlite="warn"):
    return resolve_policy(provisioner=GATEWAY, cache_policy=cache_policy, mount_options=mount_options,
                          kind="nfsv3-gateway", sqlite=sqlite)


def test_a_v3_only_gateway_needs_vers_3_and_its_ports():
    policy = gateway()
    messages = [problem.message for problem in policy.errors]
    assert any("serves NFSv3 only" in m and "add vers=3" in m for m in messages), messages
    assert any("add port=<port> and mountport=<port>" in m for m in messages), messages
    assert gateway("vers=3", "port=2049", "mountport=20048", "nolock").valid


def test_without_rpcbind_locks_need_nolock():
    (warning,) = gateway("vers=3", "port=2049", "mountport=20048").warnings
    assert "NFSv3 locking needs it" in warning.message and "Add nolock." in warning.message


def test_nolock_is_no_sqlite_hazard_on_a_read_only_volume():
    assert gateway("vers=3", "port=2049", "mountport=20048", "nolock").warnings == ()
    (warning,) = gateway("vers=3", "port=2049", "mountport=20048", "nolock", cache_policy="cached").warnings
    assert "two nodes can write one SQLite database at once" in warning.message
    assert gateway("vers=3", "port=2049", "mountport=20048", "nolock", cache_policy="cached",
                   sqlite="forbid").warnings == ()


def test_the_kind_defaults_from_the_provisioner():
    assert backend_kind("efs.csi.aws.com") == "efs" and backend_kind(GATEWAY) == "nfs"
    # An EFS file system mounted through the generic NFS driver still gets the AWS baseline.
    policy = resolve_policy(provisioner=GATEWAY, cache_policy="cached", kind="efs")
    assert policy.options["vers"] == "4.1" and policy.options["resvport"] is False


def test_on_efs_the_imports_flags_are_warned_of_whatever_the_credits_and_named_where_they_come_from():
    flags = resolve_policy(provisioner="efs.csi.aws.com", cache_policy="cached",
                           mount_options=["sync", "actimeo=0", "lookupcache=none"])
    (warning,) = [w for w in flags.warnings if "metered as at least 4 KiB" in w.message]
    assert warning.field == "spec.mountOptions"
    assert warning.message.startswith("on EFS sync, actimeo=0, lookupcache=none make every stat() and open() a round "
                                      "trip per path component (5 for a file two directories down: kernel lab) and "
                                      "every write() wait for the server (nfs(5))")
    assert "use cachePolicy staging" in warning.message
    strict = resolve_policy(provisioner="efs.csi.aws.com", cache_policy="strict")
    assert [w.field for w in strict.warnings if "metered" in w.message] == ["spec.cachePolicy"]
    noac = resolve_policy(provisioner="efs.csi.aws.com", cache_policy="staging", mount_options=["noac"])
    assert any("on EFS sync, actimeo=0 make" in w.message for w in noac.warnings)


@pytest.mark.parametrize(("provisioner", "cache_policy"), [
    ("efs.csi.aws.com", "staging"),  # one GETATTR per stat(): the price of never being stale, not warned of
    ("efs.csi.aws.com", "cached"),
    ("nfs.csi.k8s.io", "strict"),  # no metering outside EFS
])
def test_what_costs_no_metered_round_trips_is_not_warned_of(provisioner, cache_policy):
    policy = resolve_policy(provisioner=provisioner, cache_policy=cache_policy)
    assert not any("metered" in w.message for w in policy.warnings), policy.warnings
