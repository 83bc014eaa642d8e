"""The operator's gauges that alerts read (handlers/metrics.py): findings by namespace and workload within their
cap, volumes no report confirms, rollouts held, and a deleted profile taking its series along."""

import pytest
from prometheus_client import REGISTRY

from mountwarden.adapters.pods import placement
from mountwarden.core.findings import Finding, Reason, Severity, Subject
from mountwarden.handlers import metrics


def series(name: str, **match: str) -> dict[tuple, float]:
    """The samples of ``name`` whose labels include ``match``, by their label values."""
    return {tuple(sample.labels.values()): sample.value for family in REGISTRY.collect() for sample in family.samples
            if sample.name == name and match.items() <= sample.labels.items()}


def on_pod(reason: Reason, severity: Severity, uid: str, namespace: str = "shop") -> Finding:
    return Finding(reason, severity, "m", subject=Subject("Pod", f"pod-{uid}", namespace, uid))


@pytest.fixture
def profile(request):
    name = f"p-{request.node.name}"[:60]
    yield name
    metrics.forget_profile(name)


def test_findings_are_counted_by_namespace_and_workload_of_their_pod(profile):
    workloads = {"u1": "Deployment/web", "u2": "Deployment/web", "u3": "StatefulSet/db"}
    metrics.record_findings(profile, "compliance", [
        on_pod(Reason.OPTION_MISMATCH, Severity.ERROR, "u1"), on_pod(Reason.OPTION_MISMATCH, Severity.ERROR, "u2"),
        on_pod(Reason.SQLITE_ON_NFS, Severity.CRITICAL, "u3"), on_pod(Reason.OPTION_MISMATCH, Severity.INFO, "u3"),
    ], lambda uid: workloads.get(uid, ""))

    assert series("mountwarden_findings", profile=profile) == {
        (profile, "compliance", "shop", "Deployment/web", "OptionMismatch", "error"): 2,
        (profile, "compliance", "shop", "StatefulSet/db", "SQLiteOnNFS", "critical"): 1,
    }
    metrics.record_findings(profile, "compliance", [on_pod(Reason.SQLITE_ON_NFS, Severity.CRITICAL, "u3")],
                            lambda uid: workloads.get(uid, ""))
    assert list(series("mountwarden_findings", profile=profile)) == [
        (profile, "compliance", "shop", "StatefulSet/db", "SQLiteOnNFS", "critical")]


def test_findings_series_stay_within_their_cap_the_worst_kept_and_the_rest_counted(profile, monkeypatch):
    served_already = sum(len(labels) for labels in metrics._finding_series.values())  # other tests' profiles
    monkeypatch.setattr(metrics, "MAX_FINDING_SERIES", served_already + 3)
    found = [on_pod(Reason.TRANSPORT_UNHEALTHY, Severity.WARNING, f"w{n}", namespace=f"ns{n}") for n in range(4)]
    found += [on_pod(Reason.SQLITE_ON_NFS, Severity.CRITICAL, "c", namespace="db")]
    metrics.record_findings(profile, "compliance", found, lambda uid: f"Pod/{uid}")

    served = series("mountwarden_findings", profile=profile)
    assert len(served) == 3
    assert (profile, "compliance", "db", "Pod/c", "SQLiteOnNFS", "critical") in served  # the worst is never left out
    (over,) = series("mountwarden_findings_over_cap").values()
    assert over == 2

    metrics.forget_profile(profile)
    assert series("mountwarden_findings", profile=profile) == {}
    assert series("mountwarden_findings_over_cap") == {(): 0}


def test_unverified_volumes_by_node_and_reason_go_once_confirmed(profile):
    metrics.record_unverified(profile, {("node-a", "ReportStale"): 2, ("node-b", "ReportMissing"): 1})
    assert series("mountwarden_unverified_volumes", profile=profile) == {
        (profile, "node-a", "ReportStale"): 2, (profile, "node-b", "ReportMissing"): 1}
    metrics.record_unverified(profile, {("node-b", "ReportMissing"): 1})
    assert series("mountwarden_unverified_volumes", profile=profile) == {(profile, "node-b", "ReportMissing"): 1}


def test_a_rollout_says_its_phase_and_the_workloads_it_waits_on(profile):
    metrics.record_rollout(profile, {"phase": "Waiting", "workloads": [
        {"kind": "Deployment", "namespace": "shop", "name": "web", "state": "Waiting", "reason": "DisruptionBudget"},
        {"kind": "StatefulSet", "namespace": "shop", "name": "db", "state": "Done", "reason": "Verified"},
    ]})
    assert series("mountwarden_rollout_phase", profile=profile, phase="Waiting") == {(profile, "Waiting"): 1}
    assert sum(series("mountwarden_rollout_phase", profile=profile).values()) == 1
    assert series("mountwarden_rollout_workloads_held", profile=profile) == {
        (profile, "shop", "Deployment/web", "Waiting", "DisruptionBudget"): 1}

    metrics.record_rollout(profile, {"phase": "Complete", "workloads": []})
    assert series("mountwarden_rollout_workloads_held", profile=profile) == {}
    metrics.forget_profile(profile)
    assert series("mountwarden_rollout_phase", profile=profile) == {}


def test_the_operator_names_a_deployments_pod_by_its_deployment():
    pod = {"metadata": {"uid": "u", "namespace": "shop", "name": "web-5f7c9-abcde",
                        "labels": {"pod-template-hash": "5f7c9"},
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5f7c9", "controller": True}]},
           "spec": {"nodeName": "n", "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}}
    found = placement(pod)
    assert found is not None and (found.workload, found.controlled) == ("Deployment/web", True)
