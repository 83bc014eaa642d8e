"""Findings as PolicyReports on the local control plane, with the upstream v1alpha2 CRDs (hack/policyreport-crds).

Without the CRDs, `--policy-reports` costs one log line and nothing else. With them, pods' findings appear in the
PolicyReport of their namespace, change as the findings change, and go when the findings go; a profile's
draining credits appear in the ClusterPolicyReport. The findings come from the real path: `mountwarden agent
--once` over a proc root assembled from real mountstats samples, and moto's CloudWatch series.
"""

from collections.abc import Iterator

import kubernetes
import pytest
from tests.integration.moto_server import aligned_now, dummy_aws_environment, seed
from tests.integration.test_compliance import pod_with, report_once, sqlite_proc_root, volume_for
from tests.procroot import Mount
from tests.support import ROOT, OperatorProcess, profile_body, wait_for

pytestmark = pytest.mark.cluster

CRDS = ROOT / "hack" / "policyreport-crds"
GROUP, VERSION = "wgpolicyk8s.io", "v1alpha2"
OFF_LINE = "PolicyReports are off: the API server does not serve"


def reporting_operator(cluster, moto_endpoint: str, log_dir) -> OperatorProcess:
    env = {**dummy_aws_environment(log_dir), "AWS_ENDPOINT_URL": moto_endpoint, "MOUNTWARDEN_POLICY_REPORTS": "true"}
    process = OperatorProcess(str(cluster.kubeconfig), log_dir, extra_env=env)
    process.start()
    return process


@pytest.fixture(scope="module")
def policy_report_crds(cluster) -> Iterator[None]:
    """The upstream CRDs, installed for a module and removed after it (an existing cluster keeps its own), and
    waited for: test_without_the_crds_the_operator_says_so_once_and_runs_on needs a cluster without them."""
    served_before = cluster.kubectl("get", "crd", "policyreports.wgpolicyk8s.io", check=False).returncode == 0
    for path in sorted(CRDS.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS))
    yield
    if not served_before:
        cluster.kubectl("delete", "--wait=true", "-f", str(CRDS))


@pytest.fixture(scope="module")
def operator_with_reports(cluster, crds_installed, policy_report_crds, _moto_server_process,
                          tmp_path_factory) -> Iterator[OperatorProcess]:
    process = reporting_operator(cluster, _moto_server_process.endpoint_url, tmp_path_factory.mktemp("operator"))
    yield process
    process.stop()


def report(kube, namespace):
    try:
        return kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "policyreports", "mountwarden")
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def cluster_results(kube, profile):
    try:
        body = kube.custom.get_cluster_custom_object(GROUP, VERSION, "clusterpolicyreports", "mountwarden")
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return []
        raise
    return [result for result in body.get("results") or [] if result["policy"] == profile]


def test_without_the_crds_the_operator_says_so_once_and_runs_on(cluster, crds_installed, kube, _moto_server_process,
                                                                 tmp_path_factory, unique):
    if cluster.kubectl("get", "crd", "policyreports.wgpolicyk8s.io", check=False).returncode == 0:
        pytest.fail("this test needs a cluster without the wgpolicyk8s.io CRDs (they are installed here)",
                    pytrace=False)
    process = reporting_operator(cluster, _moto_server_process.endpoint_url, tmp_path_factory.mktemp("operator"))
    try:
        name = f"no-reports-{unique}"
        kube.apply_profile(profile_body(name))
        wait_for(lambda: kube.classes_of(name), timeout=90, what="the profile's StorageClass")
        process.assert_running()
        lines = [line for line in process.logs().splitlines() if OFF_LINE in line]
        assert len(lines) == 1, process.logs()[-3000:]
        assert "policyreports.wgpolicyk8s.io/v1alpha2" in lines[0] and "restart the operator" in lines[0]
        kube.delete_profile(name)
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

    # Clear: the profile declares what is mounted (a merge patch: null removes the preset); no finding is
    # left, and the report is deleted.
    exact = profile_body(profile, backend={"provisioner": "nfs.csi.k8s.io"})
    exact["spec"]["cachePolicy"] = None
    exact["spec"]["mountOptions"] = ["vers=4.2", "hard"]
    kube.apply_profile(exact)
    wait_for(lambda: report(kube, namespace) is None, timeout=90, what="the report to be deleted")
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

    kube.delete_profile(profile)
    wait_for(lambda: not cluster_results(kube, profile), timeout=90, what="the profile's result to leave")
