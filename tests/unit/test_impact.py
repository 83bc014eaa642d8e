"""Which finding a person reads first: ranked by impact (core/impact.py), over findings the real checks emit."""

import json
from datetime import UTC, datetime, timedelta
from importlib import resources

from mountwarden.core.baseline import round_trip_options, soft_writable
from mountwarden.core.compliance import Consumer, Contract, ProfileCompliance, VolumeState, assess
from mountwarden.core.findings import Reason, Severity
from mountwarden.core.impact import WAIT_MS, Harm, by_impact, impact_of, options_of
from mountwarden.core.node.report import NodeReport, ReportedMount, SqliteUse
from mountwarden.core.options.compare import check
from mountwarden.core.options.effects import Cost
from mountwarden.core.options.normalize import normalize
from mountwarden.core.policy import resolve_policy

NOW = datetime(2026, 12, 2, tzinfo=UTC)
EFS = "efs.csi.aws.com"
#: The upload service's volume in `make run`: the old shared mount's flags (the import's), as the kernel prints them.
IMPORT_FLAGS = ("rw", "sync", "vers=4.1", "rsize=1048576", "wsize=1048576", "namlen=255", "acregmin=0", "acregmax=0",
                "acdirmin=0", "acdirmax=0", "hard", "lookupcache=none", "proto=tcp", "timeo=600", "retrans=2",
                "sec=sys", "local_lock=none")


#: upload-staging's contract (examples/upload-staging.yaml).
REQUIRED, FORBIDDEN = ("hard", "cto"), ("nocto",)


def _staging():
    return resolve_policy(provisioner=EFS, cache_policy="staging", required_options=REQUIRED,
                          forbidden_options=FORBIDDEN)


def _findings(observed: tuple[str, ...], policy=None):
    policy = policy or _staging()
    return check(policy.options, normalize(list(observed), observed=True).options,
                 required=REQUIRED, forbidden=FORBIDDEN).findings


def test_the_imports_sync_and_lookupcache_none_come_before_a_directory_cache_difference():
    findings = _findings(IMPORT_FLAGS)
    # The checks emit the attribute-cache difference before sync: order is not impact.
    emitted = [f.option for f in findings if f.counts]
    assert emitted.index("acdirmin=0,acdirmax=0") < emitted.index("sync")
    ranked = [f.option for f in by_impact(findings) if f.counts]
    assert ranked[:3] == ["sync", "lookupcache", "acdirmin=0,acdirmax=0"]
    sync, lookups, directories = (impact_of(f) for f in by_impact(findings)[:3])
    assert sync.harm is lookups.harm is directories.harm is Harm.ADDED_WAIT
    assert sync.added_wait_ms == WAIT_MS[Cost.WRITES] > lookups.added_wait_ms == WAIT_MS[Cost.PATH_LOOKUPS]
    # lookupcache=none and acdir*=0 cost the same per stat() (kernel lab); the contract declared lookupcache.
    assert (lookups.added_wait_ms, lookups.declared, directories.declared) == (directories.added_wait_ms, True, False)
    # All three are errors: severity alone could not have ordered them.
    assert {f.severity for f in by_impact(findings)[:3]} == {Severity.ERROR}


def test_costs_outrank_staleness_and_staleness_outranks_what_costs_nothing():
    cached = resolve_policy(provisioner=EFS, cache_policy="cached", required_options=["hard"])
    # A staging volume mounted as cached: a file's attributes up to 600 s stale, no round trip added.
    stale = _findings(("rw", "vers=4.1", "hard", "acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600",
                       "timeo=600", "retrans=2", "local_lock=none", "lookupcache=positive"))
    staleness = [f for f in stale if impact_of(f).harm is Harm.STALE_READS]
    assert staleness and impact_of(staleness[0]).stale_seconds == 600
    # A cached volume mounted with actimeo=0: a GETATTR per stat() and a round trip per path component.
    costly = _findings(("rw", "vers=4.1", "hard", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0",
                        "timeo=600", "retrans=2", "local_lock=none"), cached)
    actimeo = next(f for f in costly if f.option == "acregmin")
    assert impact_of(actimeo).harm is Harm.ADDED_WAIT
    assert by_impact([staleness[0], actimeo])[0] is actimeo
    timeo = _findings(("rw", "vers=4.1", "hard", "acregmin=0", "acregmax=0", "lookupcache=positive", "timeo=100",
                       "retrans=2", "local_lock=none"))
    other = next(f for f in timeo if f.option == "timeo")
    assert impact_of(other).harm is Harm.OTHER
    assert by_impact([other, staleness[0]])[0] is staleness[0]
    # A mount fresher than its contract (cached declares acregmax=600; the kernel default is 60) risks nothing.
    fresher = _findings(("rw", "vers=4.1", "hard", "acregmin=3", "acregmax=60", "acdirmin=600", "acdirmax=600",
                         "lookupcache=all", "timeo=600", "retrans=2", "local_lock=none"), cached)
    acregmax = next(f for f in fresher if f.option == "acregmax")
    assert (acregmax.expected, acregmax.actual) == (600, 60)
    assert (impact_of(acregmax).harm, impact_of(acregmax).stale_seconds) == (Harm.OTHER, 0)


def test_data_at_risk_comes_first_whatever_the_round_trips():
    soft_mount = normalize(["rw", "soft", "sync", "lookupcache=none"], observed=True).options
    soft = soft_writable(soft_mount)
    flags = round_trip_options(soft_mount, efs=True)
    assert soft is not None and flags is not None
    assert options_of(flags) == {"sync": True, "lookupcache": "none"}
    assert impact_of(flags).added_wait_ms == WAIT_MS[Cost.WRITES] + WAIT_MS[Cost.PATH_LOOKUPS]
    sqlite = SqliteUse("uid-1", "pv-1", Severity.WARNING, "rollback", "/data/app.db", "SQLite in rollback mode").finding()
    assert [impact_of(f).harm for f in (soft, sqlite)] == [Harm.DATA_AT_RISK, Harm.DATA_AT_RISK]
    assert by_impact([flags, sqlite, soft])[-1] is flags
    # soft where the contract requires hard, said as an option mismatch, is the same harm.
    declared_hard = next(f for f in _findings(("rw", "vers=4.1", "soft", "acregmin=0", "acregmax=0",
                                               "lookupcache=positive", "timeo=600", "retrans=2")) if f.actual == "soft")
    assert options_of(declared_hard) == {"soft": True} and impact_of(declared_hard).harm is Harm.DATA_AT_RISK


def test_the_weights_round_trips_are_the_kernel_labs():
    facts = json.loads(resources.files("mountwarden.core.options").joinpath("kernel_facts.json").read_text())
    strict, staging = facts["presets"]["strict"]["cost"], facts["presets"]["staging"]["cost"]
    calls = strict["paced_calls"]
    metadata_ms = 1.0  # a metadata round trip at EFS's best (core/credits/bucket.py READ_ROUND_TRIP_SECONDS)
    assert round(strict["stat_loop"]["LOOKUP"] / calls) * metadata_ms == WAIT_MS[Cost.PATH_LOOKUPS]
    assert round((strict["stat_loop"]["GETATTR"] - staging["stat_loop"]["GETATTR"]) / calls) * metadata_ms == \
        WAIT_MS[Cost.PATH_LOOKUPS]
    assert round(staging["stat_loop"]["GETATTR"] / calls) * metadata_ms == WAIT_MS[Cost.ATTRIBUTES]


def test_a_profiles_worst_offender_and_its_reason_are_its_most_costly_finding():
    """The Compliant condition's "worst" (what `make run` shows) names sync, not the directory cache."""
    policy = _staging()
    contract = Contract(policy.options, REQUIRED, FORBIDDEN)
    report = NodeReport("lab-node-0", NOW, (
        ReportedMount("uid-uploads", "demo-uploads", "/var/lib/kubelet/pods/uid-uploads/volumes/nfs/demo-uploads",
                      "0:61", IMPORT_FLAGS),
        ReportedMount("uid-api", "demo-api", "/var/lib/kubelet/pods/uid-api/volumes/nfs/demo-api", "0:62",
                      ("rw", "vers=4.1", "hard", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0",
                       "lookupcache=positive", "timeo=600", "retrans=2", "local_lock=none")),
    ))
    uploads = assess(Consumer("uid-uploads", "web", "uploads", "lab-node-0", "demo-uploads"), contract,
                     {"lab-node-0": report}, now=NOW, stale_after=timedelta(minutes=15))
    assert uploads.state is VolumeState.DRIFTED and uploads.reason == Reason.UNDECLARED_OPTION
    assert uploads.message.startswith("web/uploads on lab-node-0: sync is in effect")
    # Another pod, alphabetically first, whose only drift is the directory attribute cache.
    api = assess(Consumer("uid-api", "web", "api", "lab-node-0", "demo-api"), contract, {"lab-node-0": report},
                 now=NOW, stale_after=timedelta(minutes=15))
    assert api.state is VolumeState.DRIFTED and "acdirmin=0,acdirmax=0" in api.message
    unknown = assess(Consumer("uid-new", "web", "aaa", None, "demo-new"), contract, {}, now=NOW,
                     stale_after=timedelta(minutes=15))
    worst = ProfileCompliance.of([unknown, api, uploads]).worst_offenders()
    assert [v.consumer.pod for v in worst] == ["web/uploads", "web/api", "web/aaa"]
    status, _, message = ProfileCompliance.of([unknown, api, uploads]).condition()
    assert status == "False" and message.split("; worst: ")[1].startswith("web/uploads on lab-node-0: sync")
