"""`make run`'s view (mountwarden dev-cluster watch) over a real API server: the operator's own objects, a drifted
pod's worst finding, and no change to show while only ages, scan times and counters move (a new agent scan)."""

import io

import pytest
from rich.console import Console
from tests.integration.test_compliance import pod_with, report_once, volume_for
from tests.integration.test_policy_reports import (  # noqa: F401 (fixtures)
    openreports_crds,
    operator_with_reports,
    policy_report_crds,
)
from tests.procroot import Mount, assemble_proc_root
from tests.support import profile_body, wait_for

from mountwarden.devcluster.demoview import SELECTORS, fetch_objects, render

pytestmark = pytest.mark.cluster


def look(cluster, namespace: str):
    """The view as `dev-cluster watch` computes it, narrowed to this test's namespace and profile."""
    def get(kind: str) -> tuple[bool, str]:
        scope = ("-n", namespace) if kind in ("events", "policyreports") else ()
        result = cluster.kubectl("get", kind, *scope, *SELECTORS.get(kind, ()), "-o", "json", check=False)
        return result.returncode == 0, result.stdout if result.returncode == 0 else result.stderr
    return fetch_objects(get)


def own(view, profile: str, node: str):
    """The view's rows of this test's profile, its classes, its node's mounts, its namespace's Events and report."""
    return (tuple(p for p in view.profiles if p.name == profile),
            tuple(c for c in view.classes if c.name.startswith(f"{profile}-v")),
            tuple(m for m in view.mounts if m.node == node), view.events,
            tuple(r for r in view.reports if r.scope != "(cluster)"))


def test_the_view_shows_the_worst_finding_and_stays_the_same_across_agent_scans(
        cluster, kube, operator_with_reports, namespace, unique, tmp_path):  # noqa: F811 (the fixture)
    node = cluster.node_names[1]
    profile = f"view-{unique}"
    # staging declares acregmin=acregmax=0 and lookupcache=positive; the sample's /D mount has the defaults: drift.
    kube.apply_profile(profile_body(profile, "staging", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(profile), what="the profile's class")
    pv = f"pv-view-{unique}"
    volume_for(kube, namespace, pv, f"{profile}-v1")
    uid = pod_with(kube, namespace, node, "drifted", pv)
    proc_root = assemble_proc_root(tmp_path / "proc", [Mount(pv, pod_uid=uid, sample_mount="/D")]).path
    report_once(cluster, node, proc_root)

    # Several writers, several moments: the drift Event is posted as soon as the report arrives; the compliance
    # timer's tick writes the Compliant condition, then the PolicyReport, then status.compliance (the worst
    # offenders) as kopf's patch at its end, and its tick before the report said ReportMissing (Unverified). The
    # view is taken once every one of them says the drift.
    def settled():
        view = look(cluster, namespace)
        row = next((p for p in view.profiles if p.name == profile), None)
        return row and row.compliant == "Drifted" and row.worst and row.worst[0] == "OptionMismatch" and \
            any(r.scope == namespace and "OptionMismatch" in r.rules for r in view.reports) and \
            any(e.name == "drifted" and e.reason == "MountPolicyDrift" for e in view.events) and (view, row)
    first, row = wait_for(settled, timeout=90, what="the drift in status, Events and the PolicyReport")
    reason, pod, message = row.worst
    assert pod == f"{namespace}/drifted"
    # The default acregmax against staging's 0: stat() that many seconds stale, the finding with the most impact.
    assert reason == "OptionMismatch", message
    assert message.split(": ", 1)[1].startswith("declared acregmax=0 but the mount has acregmax="), message
    console = Console(file=io.StringIO(), width=300, record=True)
    console.print(render(first))
    text = console.export_text()
    assert f"worst: {reason} ({namespace}/drifted)" in text and f"{profile}-v1" in text

    def scan_time() -> str:
        return kube.custom.get_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports",
                                                     node)["spec"]["scanTime"]
    scanned = scan_time()
    # Scan again, writing the heartbeat the agent writes when nothing else changed, until the report says a later
    # scan time (its resolution is one second).
    wait_for(lambda: report_once(cluster, node, proc_root, "--heartbeat", "1") or scan_time() != scanned, timeout=60,
             what="the agent's heartbeat")
    # What this test made, compared: other modules' profiles may still be settling on the same cluster.
    assert own(look(cluster, namespace), profile, node) == own(first, profile, node)
    operator_with_reports.assert_running()
    kube.delete_profile(profile)
