import pytest

from mountwarden.core.options.compare import OriginHints, check, compare, compare_undeclared
from mountwarden.core.options.normalize import normalize
from mountwarden.core.policy import resolve_policy

EFS_MOUNT_TABLE = (
    "rw,relatime,vers=4.1,rsize=1048576,wsize=1048576,namlen=255,hard,noresvport,proto=tcp,"
    "timeo=600,retrans=2,sec=sys,clientaddr=10.0.1.7,local_lock=none,addr=10.0.0.9"
)


def observed(text):
    return normalize(text, observed=True).options


def declared(preset, *overrides):
    return resolve_policy(provisioner="efs.csi.aws.com", cache_policy=preset, mount_options=overrides).options


def test_missing_options_count_as_kernel_defaults():
    # /proc/mounts never prints actimeo and prints ac* only when they differ from defaults.
    findings = compare(declared("cached"), observed(EFS_MOUNT_TABLE))
    by_option = {f.option: f for f in findings}
    assert set(by_option) == {"acregmin", "acregmax", "acdirmin", "acdirmax"}
    assert by_option["acregmax"].expected == 600 and by_option["acregmax"].actual == 60
    assert by_option["acregmax"].severity == "error"
    assert "(the kernel default)" in by_option["acregmax"].message


def test_declared_defaults_match_an_empty_mount_table():
    # lookupcache=all is declared by cached; the mount table omits it because it is the default.
    assert compare({"lookupcache": "all", "cto": True}, observed("rw,vers=4.1")) == []


def test_compliant_mount():
    mount = EFS_MOUNT_TABLE + ",acregmin=600,acregmax=600,acdirmin=600,acdirmax=600"
    result = check(declared("cached"), observed(mount), required=["hard"], forbidden=["soft", "nolock"])
    assert result.compliant, result.findings


def test_strict_declared_but_cached_mounted():
    mount = EFS_MOUNT_TABLE + ",acregmin=600,acregmax=600,acdirmin=600,acdirmax=600"
    findings = compare(declared("strict"), observed(mount))
    lookup = next(f for f in findings if f.option == "lookupcache")
    assert (lookup.expected, lookup.actual) == ("none", "all")


def test_hard_soft_family_is_compared_as_one():
    (finding,) = compare({"hard": True}, observed("rw,vers=4.1,soft"))
    assert (finding.option, finding.expected, finding.actual, finding.severity) == (
        "hard",
        "hard",
        "soft",
        "error",
    )


def test_vers_4_accepts_any_minor_version():
    assert compare({"vers": "4"}, observed("vers=4.2")) == []
    (finding,) = compare({"vers": "4.1"}, observed("vers=4,minorversion=0"))
    assert finding.actual == "4.0"


def test_performance_drift_is_a_warning_and_explains_negotiation():
    (finding,) = compare({"rsize": 1048576}, observed("rsize=65536"))
    assert finding.severity == "warning" and "negotiated it down" in finding.message


def test_efs_utils_options_are_not_checked_against_the_mount_table():
    assert compare({"tls": True, "iam": True}, observed("rw,vers=4.1,port=20049")) == []


def test_required_and_forbidden():
    result = check(
        {}, observed("rw,vers=3,soft,nolock"), required=["hard", "vers=4.1"], forbidden=["nolock", "soft"]
    )
    messages = [f.message for f in result.findings]
    assert not result.compliant
    assert any("hard is required" in m for m in messages)
    assert any("vers=4.1 is required but the mount has vers=3" in m for m in messages)
    assert any("nolock is forbidden" in m for m in messages)
    assert any("soft is forbidden" in m for m in messages)


def test_forbidden_bare_name_forbids_any_value():
    result = check({}, observed("rw,nconnect=4"), forbidden=["nconnect"])
    assert [f.option for f in result.findings] == ["nconnect"]


def test_forbidden_actimeo_zero_matches_the_four_times():
    result = check({}, observed("acregmin=0,acregmax=0,acdirmin=0,acdirmax=0"), forbidden=["actimeo=0"])
    assert not result.compliant
    partial = check({}, observed("acregmin=0"), forbidden=["actimeo=0"]).findings
    assert [f.option for f in partial] == ["acregmin"] and partial[0].undeclared  # drift, but not the forbidden one


def test_info_findings_keep_compliance():
    result = check({"addr": "10.0.0.1"}, observed("rw"))
    assert result.compliant and result.findings[0].severity == "info"


def test_to_dict_shape():
    result = check({"hard": True}, observed("soft")).to_dict()
    assert result["compliant"] is False
    assert set(result["findings"][0]) == {"reason", "option", "expected", "actual", "severity", "message", "remedy",
                                          "undeclared", "other_mounts", "evidence"}


# -- options nobody declared ------------------------------------------------------------------------

CACHED_ON_EFS = EFS_MOUNT_TABLE + ",acregmin=600,acregmax=600,acdirmin=600,acdirmax=600"


def test_an_undeclared_sync_is_drift_named_with_its_effect_and_origin():
    # The incident's import: the preset promises caching, the mount table says sync.
    result = check(declared("cached"), observed(CACHED_ON_EFS.replace("rw,", "rw,sync,")))
    (finding,) = result.findings
    assert not result.compliant
    assert (finding.option, finding.expected, finding.actual, finding.severity, finding.undeclared) == (
        "sync", False, True, "error", True)
    assert finding.message.startswith("sync is in effect but the contract does not declare it (its preset and the "
                                      "kernel default imply async). Every write() waits for the server")
    assert "the 8-hour import (the incident)" in finding.message
    assert "a CSI driver's default" in finding.message and "not a shared superblock" in finding.message


@pytest.mark.parametrize(("extra", "option", "actual"), [
    ("lookupcache=none", "lookupcache", "none"),
    ("nocto", "cto", False),
    ("soft", "soft", "soft"),
    ("local_lock=all", "local_lock", "all"),
])
def test_every_behaviour_option_is_checked_declared_or_not(extra, option, actual):
    # A profile that declares only nconnect on a generic NFS server: the kernel defaults are its contract.
    (finding,) = check({"nconnect": 4}, observed(f"rw,vers=3,nconnect=4,{extra}")).findings
    assert (finding.option, finding.actual, finding.undeclared) == (option, actual, True)


def test_noac_nobody_declared_is_one_finding():
    (finding,) = compare_undeclared({}, observed("rw,vers=4.1,noac"))
    assert finding.option == "noac" and finding.severity == "error"
    assert finding.message.startswith("noac (actimeo=0 plus sync) is in effect but the contract does not declare it")


def test_actimeo_nobody_declared_is_one_finding():
    (finding,) = compare_undeclared({}, observed("rw,vers=4.1,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0"))
    assert finding.option == "actimeo=0"


def test_nolock_on_a_read_only_volume_is_no_hazard():
    (finding,) = compare_undeclared({}, observed("ro,vers=3,nolock,local_lock=all"))  # as the kernel shows it
    assert (finding.option, finding.severity) == ("lock", "info")
    assert "no SQLite hazard" in finding.message


def test_the_origin_names_the_pv_when_it_carries_the_option():
    hints = OriginHints(pv_options=observed("sync,hard"), storage_class="importer-scratch-v1")
    (finding,) = compare_undeclared(declared("cached"), observed(CACHED_ON_EFS + ",sync"), hints)
    assert "The PersistentVolume's spec.mountOptions (StorageClass importer-scratch-v1) carry it" in finding.message


def test_the_origin_is_the_csi_driver_when_the_pv_does_not_ask_for_it():
    hints = OriginHints(pv_options=observed("hard"), shared_with=("/other",))
    (finding,) = compare_undeclared(declared("cached"), observed(CACHED_ON_EFS + ",sync"), hints)
    assert "the CSI driver or its mount helper adds it (a CSI default)" in finding.message
    assert "so /other, sharing this one, asked for it too" in finding.message


def test_declared_values_are_left_to_compare():
    assert compare_undeclared(declared("strict"), observed("rw,vers=4.1,acregmin=60")) == []


def test_nfsv3_nolock_is_in_effect_as_local_lock_all_and_a_contract_that_declares_nolock_holds():
    # The S3 gateway's client setup: vers=3 with its ports, nolock, read-only. The kernel shows nolock with
    # local_lock=all (kernel lab, kernel_facts.json "locking"); neither is drift against a contract that says nolock.
    gateway = observed("ro,vers=3,rsize=131072,wsize=131072,namlen=255,hard,nolock,proto=tcp,port=2049,timeo=600,"
                       "retrans=2,sec=sys,mountport=20048,mountproto=tcp,local_lock=all,addr=10.0.0.9")
    contract = {"ro": True, "vers": "3", "port": 2049, "mountport": 20048, "lock": False}
    result = check(contract, gateway)
    assert result.compliant, [finding.message for finding in result.findings]
    # Declaring local_lock=none against that mount is a mismatch, named as such.
    (mismatch,) = check({**contract, "local_lock": "none"}, gateway).findings
    assert (mismatch.option, mismatch.expected, mismatch.actual) == ("local_lock", "none", "all")


def test_a_contract_on_nfsv3_without_nolock_is_told_of_local_lock_all_once():
    (finding,) = compare_undeclared({"vers": "3"}, observed("rw,vers=3,nolock,local_lock=all"))
    assert (finding.option, finding.actual, finding.undeclared) == ("lock", False, True)
