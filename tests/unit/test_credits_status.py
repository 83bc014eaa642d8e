"""status.credits as the operator writes it: the forecast, who drains, and a merge patch that drops what is gone."""

from datetime import UTC, datetime, timedelta

import pytest
from tests.credit_scenarios import HOUR, credit_series, nightly_drain, trap
from tests.support import report_spec

from mountwarden.adapters.pods import PodPlacements, placement
from mountwarden.api.nodemountreport import LazyNodeReport
from mountwarden.api.storageprofile import CreditsStatus
from mountwarden.core.credits import CreditWatchProblem, ProblemReason
from mountwarden.core.storageclass import ClassEntry
from mountwarden.handlers.credits import CreditWatchTarget, _credits_status, _replacing, consumers_on

END = datetime(2026, 3, 1, 22, 25, tzinfo=UTC)
FS = "fs-0123456789abcdef0"
TARGET = CreditWatchTarget(FS, "", timedelta(hours=48), "scratch")


def report(node, pod_uid, volume, ops):
    """The report as kopf's index files it: as written, read when asked."""
    return LazyNodeReport(node, report_spec(node, scanTime="2026-03-01T22:20:00Z", volumes=[
        {"podUid": pod_uid, "volumeName": volume, "superblock": f"0:{len(volume)}", "ageSeconds": 100,
         "mountPoint": f"/var/lib/kubelet/pods/{pod_uid}/volumes/kubernetes.io~csi/{volume}/mount",
         "effectiveOptions": ["vers=4.1"], "operations": {"GETATTR": {"ops": ops}}}]))


def pod(uid, name, claim, node="node-1"):
    return {"metadata": {"uid": uid, "name": name, "namespace": "data"},
            "spec": {"nodeName": node, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}


def placements(*pods):
    known = PodPlacements(None)
    known.load(placement(body) for body in pods)
    return known


def indexes():
    """The operator's kopf indexes, as plain mappings of key -> stored values, and the pods' placements."""
    return {
        "reports_by_node": {"node-1": [report("node-1", "uid-a", "pv-a", 1000)],
                            "node-2": [report("node-2", "uid-b", "pv-b", 10)]},
        "pods": placements(pod("uid-a", "importer-0", "a"), pod("uid-b", "uploader-0", "b", node="node-2")),
        "claims_by_volume": {"pv-a": [{"claim": ("data", "a"), "storageClass": "scratch-v1"}],
                             "pv-b": [{"claim": ("data", "b"), "storageClass": "staging-v1"}]},
        "classes_by_name": {"scratch-v1": [ClassEntry("scratch-v1", "efs.csi.aws.com", profile="scratch")],
                            "staging-v1": [ClassEntry("staging-v1", "efs.csi.aws.com", profile="staging")]},
    }


def test_a_node_cannot_attribute_its_traffic_to_another_nodes_pod():
    forged = indexes()
    forged["reports_by_node"]["node-2"] = [report("node-2", "uid-a", "pv-a", 10**9)]  # uid-a runs on node-1
    (top,) = consumers_on(FS, [TARGET], **forged).top
    assert top.node == "node-1" and top.pods == ("data/importer-0",)


def test_the_consumers_of_every_profile_on_the_file_system_are_named():
    targets = [TARGET, CreditWatchTarget(FS, "", timedelta(hours=48), "staging")]
    summary = consumers_on(FS, targets, **indexes())
    assert [consumer.pods for consumer in summary.top] == [("data/importer-0",), ("data/uploader-0",)]
    assert summary.top[0].metered_bytes_per_second == pytest.approx(1000 * 4096 / 100)
    # A profile on another file system is not this one's consumer.
    assert consumers_on(FS, [TARGET], **indexes()).consumers == 1


def test_a_draining_forecast_becomes_a_status_the_crd_accepts():
    consumers = consumers_on(FS, [TARGET], **indexes())
    series = credit_series(nightly_drain(job_ends_before_end=6 * HOUR), END, FS)
    status, condition = _credits_status(TARGET, series, END, consumers)
    assert CreditsStatus.model_validate(status).to_wire() == status  # camelCase, no empty fields
    assert (status["state"], status["timeToEmptyBasis"]) == ("Draining", "day-over-day")
    assert status["netChangePerDayBytes"] < 0 and status["historySeconds"] == pytest.approx(48 * 3600)
    assert status["consumers"]["top"][0]["pods"] == ["data/importer-0"]
    assert status["recommendation"]["monthlyCostUsd"]["provisioned"] == pytest.approx(576.0)
    assert (condition["status"], condition["reason"]) == ("True", "Draining")


def test_the_trap_status_carries_the_elastic_cost_and_no_basis():
    status, _ = _credits_status(TARGET, credit_series(trap(), END, FS), END, None)
    assert status["state"] == "Trap"
    assert status["recommendation"]["mode"] == "elastic" and "basis" not in status["recommendation"]
    assert status["recommendation"]["monthlyCostUsd"]["elastic"] == status["elasticEstimate"]["monthlyCostUsd"]
    assert "consumers" not in status


def test_a_problem_still_names_the_consumers():
    problem = CreditWatchProblem(FS, ProblemReason.ACCESS_DENIED, "allow cloudwatch:GetMetricData")
    status, condition = _credits_status(TARGET, problem, END, consumers_on(FS, [TARGET], **indexes()))
    assert status["state"] == "Unknown" and status["consumers"]["consumers"] == 1
    assert condition["status"] == "Unknown" and "AccessDenied" in condition["message"]


def test_a_new_status_removes_what_the_old_one_had_and_it_has_not():
    old = {"state": "Draining", "timeToEmptySeconds": 10.0, "recommendation": {"mode": "provisioned", "basis": {}}}
    new = {"state": "Healthy", "recommendation": {"mode": "bursting"}}
    assert _replacing(old, new) == {"timeToEmptySeconds": None, "state": "Healthy",
                                    "recommendation": {"basis": None, "mode": "bursting"}}
