"""Findings as policy reports on the local control plane, with each group's upstream CRDs: wgpolicyk8s.io/v1alpha2
(hack/policyreport-crds) and openreports.io/v1alpha1 (hack/openreports-crds).

Without the CRDs, `--policy-reports` costs one log line and nothing else. With only OpenReports', the default
--report-format=auto writes Reports and says why. With both, a named format writes its own group alone, and auto
writes both: pods' findings appear in the PolicyReport and the Report of their namespace with the same results,
change as the findings change, and go when the findings go; a profile's draining credits appear in the
ClusterPolicyReport and the ClusterReport. The findings come from the real path: `mountwarden agent --once` over
a proc root assembled from real mountstats samples, and moto's CloudWatch series."""

from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from tests.integration.moto_server import aligned_now, dummy_aws_environment, seed
from tests.integration.test_compliance import pod_with, report_once, sqlite_proc_root, volume_for
from tests.procroot import Mount, assemble_proc_root
from tests.support import ROOT, OperatorProcess, profile_body, wait_for

from mountwarden.core.policyreport import OPENREPORTS, WGPOLICYK8S, ReportApi

pytestmark = pytest.mark.cluster

CRDS = ROOT / "hack" / "policyreport-crds"
OPENREPORTS_CRDS = ROOT / "hack" / "openreports-crds"
OFF_LINE = "PolicyReports are off: the API server does not serve"
ON_LINE = "PolicyReports on ("


def reporting_operator(cluster, moto_endpoint: str, log_dir, report_format: str | None = None) -> OperatorProcess:
    env = {**dummy_aws_environment(log_dir), "AWS_ENDPOINT_URL": moto_endpoint, "MOUNTWARDEN_POLICY_REPORTS": "true",
           **({"MOUNTWARDEN_REPORT_FORMAT": report_format} if report_format else {})}
    process = OperatorProcess(str(cluster.kubeconfig), log_dir, extra_env=env)
    process.start()
    return process


def served(cluster, api: ReportApi) -> bool:
    return cluster.kubectl("get", "crd", f"{api.plural}.{api.group}", check=False).returncode == 0


def installed(cluster, api: ReportApi, directory: Path) -> Iterator[None]:
    """A group's upstream CRDs, installed for a module and removed after it (an existing cluster keeps its own),
    and waited for: the tests that need a cluster without them run first."""
    served_before = served(cluster, api)
    for path in sorted(directory.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(directory))
    yield
    if not served_before:
        cluster.kubectl("delete", "--wait=true", "-f", str(directory))


@pytest.fixture(scope="module")
def policy_report_crds(cluster) -> Iterator[None]:
    yield from installed(cluster, WGPOLICYK8S, CRDS)


@pytest.fixture(scope="module")
def openreports_crds(cluster) -> Iterator[None]:
    yield from installed(cluster, OPENREPORTS, OPENREPORTS_CRDS)


@pytest.fixture(scope="module")
def operator_with_reports(cluster, crds_installed, policy_report_crds, openreports_crds, _moto_server_process,
                          tmp_path_factory) -> Iterator[OperatorProcess]:
    process = reporting_operator(cluster, _moto_server_process.endpoint_url, tmp_path_factory.mktemp("operator"))
    yield process
    process.stop()


def report(kube, namespace, api: ReportApi = WGPOLICYK8S):
    try:
        return kube.custom.get_namespaced_custom_object(api.group, api.version, namespace, api.plural, "mountwarden")
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def cluster_results(kube, profile, api: ReportApi = WGPOLICYK8S):
    try:
        body = kube.custom.get_cluster_custom_object(api.group, api.version, api.cluster_plural, "mountwarden")
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return []
        raise
    return [result for result in body.get("results") or [] if result["policy"] == profile]


def without_source(results: list[dict]) -> list[dict]:
    """Results as the namespaced v1alpha2 PolicyReport keeps them: its upstream schema has no result source, so
    the API server prunes it (the ClusterPolicyReport's and OpenReports' keep it)."""
    return [{key: value for key, value in result.items() if key != "source"} for result in results]


def only_line(process: OperatorProcess, marker: str) -> str:
    lines = [line for line in process.logs().splitlines() if marker in line]
    assert len(lines) == 1, process.logs()[-3000:]
    return lines[0]


def drifted_pod(cluster, kube, namespace, profile, role, tmp_path) -> str:
    """A pod of the profile whose mount the agent reports with the kernel's defaults (drift from the coherent
    preset's acregmax=3, lookupcache=positive): its UID."""
    pv = f"pv-{role}-{profile}"
    volume_for(kube, namespace, pv, f"{profile}-v1")
    uid = pod_with(kube, namespace, cluster.node_names[1], role, pv)
    report_once(cluster, cluster.node_names[1],
                assemble_proc_root(tmp_path / "proc", [Mount(pv, pod_uid=uid, sample_mount="/D")]).path)
    return uid


def test_without_the_crds_the_operator_says_so_once_and_runs_on(cluster, crds_installed, kube, _moto_server_process,
                                                                 tmp_path_factory, unique):
    if served(cluster, WGPOLICYK8S) or served(cluster, OPENREPORTS):
        pytest.fail("this test needs a cluster without the wgpolicyk8s.io and openreports.io CRDs (they are "
                    "installed here)", pytrace=False)
    process = reporting_operator(cluster, _moto_server_process.endpoint_url, tmp_path_factory.mktemp("operator"))
    try:
        name = f"no-reports-{unique}"
        kube.apply_profile(profile_body(name))
        wait_for(lambda: kube.classes_of(name), timeout=90, what="the profile's StorageClass")
        process.assert_running()
        line = only_line(process, OFF_LINE)
        assert "policyreports.wgpolicyk8s.io/v1alpha2" in line and "reports.openreports.io/v1alpha1" in line
        assert "--report-format=auto" in line and "restart the operator" in line
        kube.delete_profile(name)
    finally:
        process.stop()


def test_auto_writes_openreports_where_only_they_are_served(cluster, crds_installed, openreports_crds, kube,
                                                             _moto_server_process, namespace, unique,
                                                             tmp_path_factory, tmp_path):
    if served(cluster, WGPOLICYK8S):
        pytest.fail("this test needs a cluster without the wgpolicyk8s.io CRDs (they are installed here)",
                    pytrace=False)
    process = reporting_operator(cluster, _moto_server_process.endpoint_url, tmp_path_factory.mktemp("operator"))
    try:
        line = wait_for(lambda: ON_LINE in process.logs() and only_line(process, ON_LINE), timeout=60,
                        what="the operator to say where the reports go")
        assert ("serves openreports.io/v1alpha1 reports, not wgpolicyk8s.io/v1alpha2" in line
                and "the Report 'mountwarden' of each namespace" in line and "ClusterPolicyReport" not in line), line
        profile = f"open-{unique}"
        kube.apply_profile(profile_body(profile, "coherent", backend={"provisioner": "nfs.csi.k8s.io"}))
        wait_for(lambda: kube.classes_of(profile), what="the profile's class")
        uid = drifted_pod(cluster, kube, namespace, profile, "drifted", tmp_path)
        body = wait_for(lambda: (b := report(kube, namespace, OPENREPORTS)) and "OptionMismatch"
                        in {r["rule"] for r in b["results"]} and b, timeout=90, what="the namespace's Report")
        assert (body["apiVersion"], body["kind"]) == ("openreports.io/v1alpha1", "Report")
        drift = [r for r in body["results"] if r["rule"] == "OptionMismatch"]
        assert drift[0]["resources"][0]["uid"] == uid and drift[0]["policy"] == profile
        assert drift[0]["source"] == "mountwarden"
        process.assert_running()
        kube.delete_profile(profile)
    finally:
        process.stop()


def test_a_named_format_writes_its_group_alone_where_both_are_served(cluster, crds_installed, policy_report_crds,
                                                                      openreports_crds, kube, _moto_server_process,
                                                                      namespace, unique, tmp_path_factory, tmp_path):
    process = reporting_operator(cluster, _moto_server_process.endpoint_url, tmp_path_factory.mktemp("operator"),
                                 report_format="wgpolicyk8s")
    try:
        line = wait_for(lambda: ON_LINE in process.logs() and only_line(process, ON_LINE), timeout=60,
                        what="the operator to say where the reports go")
        assert "PolicyReports on (--report-format=wgpolicyk8s)" in line and "openreports.io" not in line, line
        profile = f"named-{unique}"
        kube.apply_profile(profile_body(profile, "coherent", backend={"provisioner": "nfs.csi.k8s.io"}))
        wait_for(lambda: kube.classes_of(profile), what="the profile's class")
        drifted_pod(cluster, kube, namespace, profile, "drifted", tmp_path)
        wait_for(lambda: (b := report(kube, namespace)) and "OptionMismatch" in {r["rule"] for r in b["results"]},
                 timeout=90, what="the namespace's PolicyReport")
        # Both groups' reports are written in the same pass: the PolicyReport there and no Report means none.
        assert report(kube, namespace, OPENREPORTS) is None
        process.assert_running()
        kube.delete_profile(profile)
    finally:
        process.stop()


def test_pod_findings_appear_update_and_clear_in_the_namespaces_report(cluster, kube, operator_with_reports, namespace,
                                                                       unique, tmp_path):
    node = cluster.node_names[1]
    profile = f"reported-{unique}"
    # coherent declares acregmax=3 and lookupcache=positive; the sample mounts have the defaults: drift.
    kube.apply_profile(profile_body(profile, "coherent", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(profile), what="the profile's class")
    pvs = {role: f"pv-{role}-{unique}" for role in ("drifted", "db")}
    for pv in pvs.values():
        volume_for(kube, namespace, pv, f"{profile}-v1")
    uids = {role: pod_with(kube, namespace, node, role, pvs[role]) for role in pvs}

    mounts = [Mount(pvs["drifted"], pod_uid=uids["drifted"], sample_mount="/D"),
              Mount(pvs["db"], pod_uid=uids["db"], sample_mount="/D")]
    assembled = sqlite_proc_root(tmp_path / "proc", mounts, mounts[1], uids["db"])
    report_once(cluster, node, assembled.path)

    # Appear: one result per finding, the pod as subject, the profile as policy.
    body = wait_for(lambda: (b := report(kube, namespace)) and {"SQLiteOnNFS", "OptionMismatch"}
                    <= {r["rule"] for r in b["results"]} and b, timeout=90, what="the namespace's PolicyReport")
    assert body["kind"] == "PolicyReport" and body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "mountwarden"}
    # The same results in the namespace's OpenReports Report.
    same = wait_for(lambda: (o := report(kube, namespace, OPENREPORTS)) and (w := report(kube, namespace))
                    and without_source(o["results"]) == w["results"] and (o, w), timeout=30,
                    what="the same results in the Report as in the PolicyReport")
    assert same[0]["kind"] == "Report" and same[0]["summary"] == same[1]["summary"]
    assert {r["source"] for r in same[0]["results"]} == {"mountwarden"}
    assert {r["policy"] for r in body["results"]} == {profile}
    (sqlite,) = [r for r in body["results"] if r["rule"] == "SQLiteOnNFS"]
    assert sqlite["resources"][0]["name"] == "db" and sqlite["properties"]["volume"] == pvs["db"]
    drift = [r for r in body["results"] if r["rule"] == "OptionMismatch" and r["resources"][0]["name"] == "drifted"]
    assert drift and drift[0]["result"] == "fail" and drift[0]["severity"] == "high"
    assert drift[0]["resources"][0] == {"apiVersion": "v1", "kind": "Pod", "name": "drifted", "namespace": namespace,
                                        "uid": uids["drifted"]}
    assert drift[0]["properties"]["node"] == node and drift[0]["properties"]["volume"] == pvs["drifted"]
    assert body["summary"]["fail"] + body["summary"]["warn"] == len(body["results"])

    # Update: the SQLite pod goes, its finding goes with it; the drift stays.
    kube.core.delete_namespaced_pod("db", namespace, grace_period_seconds=0)
    body = wait_for(lambda: (b := report(kube, namespace)) and "SQLiteOnNFS" not in {r["rule"] for r in b["results"]}
                    and b, timeout=90, what="the SQLite finding to leave the report")
    assert {r["resources"][0]["name"] for r in body["results"]} == {"drifted"}
    wait_for(lambda: (o := report(kube, namespace, OPENREPORTS)) and without_source(o["results"])
             == report(kube, namespace)["results"], timeout=30, what="the Report to follow")

    # Clear: the profile declares what is mounted (a merge patch: null removes the preset); no finding is
    # left, and the report is deleted.
    exact = profile_body(profile, backend={"provisioner": "nfs.csi.k8s.io"})
    exact["spec"]["cachePolicy"] = None
    exact["spec"]["mountOptions"] = ["vers=4.2", "hard"]
    kube.apply_profile(exact)
    wait_for(lambda: report(kube, namespace) is None and report(kube, namespace, OPENREPORTS) is None, timeout=90,
             what="both reports to be deleted")
    assert "the API server serves both groups" in only_line(operator_with_reports, ON_LINE)
    operator_with_reports.assert_running()
    kube.delete_profile(profile)


@pytest.mark.aws
def test_draining_credits_appear_in_the_cluster_report_and_leave_with_the_profile(kube, operator_with_reports,
                                                                                  moto_server, unique):
    ids = seed(moto_server, aligned_now())
    profile = f"reported-credits-{unique}"
    kube.apply_profile(profile_body(profile, "cached", creditWatch={"fileSystemId": ids["draining"], "windowHours": 3}))
    (result,) = wait_for(lambda: cluster_results(kube, profile), timeout=120, what="a result in the ClusterPolicyReport")
    assert (result["rule"], result["result"], result["severity"]) == ("CreditsDraining", "warn", "medium")
    assert result["resources"] == [{"apiVersion": "mountwarden.io/v1alpha1", "kind": "StorageProfile", "name": profile}]
    assert result["source"] == "mountwarden" and result["properties"] == {"fileSystemId": ids["draining"]}
    assert result["message"].startswith(f"{ids['draining']}: balance 1.2 TiB falling")
    assert wait_for(lambda: cluster_results(kube, profile, OPENREPORTS), timeout=30,
                    what="a result in the ClusterReport") == [result]

    kube.delete_profile(profile)
    wait_for(lambda: not cluster_results(kube, profile) and not cluster_results(kube, profile, OPENREPORTS),
             timeout=90, what="the profile's result to leave both")
