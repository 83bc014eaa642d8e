"""What the operator does with the nodes' mount failures, on the local control plane: Events from its judging loop,
evictions of pods on a stale handle past a PodDisruptionBudget.

Pods run on a kwok node; the node's report is written as its agent writes one. The real node proves the same on a
real kubelet and kernel (tests/realnode/test_real_node_mount_failures.py); here each step fails fast and says why.
A deleted pod becomes StuckTerminating only when time passes (``--stuck-after``), so its Event comes from the
loop that judges every node every ``--failure-interval``, not from a report's change: that loop runs outside any
kopf handler, and an Event posted from it once never reached the API server.
"""

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
from tests.integration.moto_server import MotoServer, dummy_aws_environment
from tests.integration.test_compliance import volume_for
from tests.support import OperatorProcess, profile_body, profile_events, put_report, scrape, wait_for

pytestmark = pytest.mark.cluster

#: Long enough for the operator to judge a report before a pod in it is stuck (a loaded machine included).
STUCK_AFTER = 15
#: Seconds between two handlings of one node's report: the operator's default (--report-min-interval), which this
#: module's operator runs with.
REPORT_MIN_INTERVAL = 2.0


@pytest.fixture(scope="module")
def judging_operator(cluster, crds_installed, _moto_server_process: MotoServer,
                     tmp_path_factory) -> Iterator[OperatorProcess]:
    """The operator judging every node each second, a deleted pod stuck STUCK_AFTER seconds past its deadline."""
    log_dir = tmp_path_factory.mktemp("operator")
    process = OperatorProcess(str(cluster.kubeconfig), log_dir, extra_env={
        **dummy_aws_environment(log_dir), "AWS_ENDPOINT_URL": _moto_server_process.endpoint_url,
        "MOUNTWARDEN_STUCK_AFTER": str(STUCK_AFTER), "MOUNTWARDEN_FAILURE_INTERVAL": "1"})
    process.start()
    yield process
    process.stop()


@pytest.fixture
def operator(judging_operator) -> OperatorProcess:
    """Under the name the operator's log is attached to a failed test by (tests/operator_fixtures.py)."""
    return judging_operator


def mount_of(uid: str, volume: str) -> dict:
    return {"podUid": uid, "volumeName": volume, "plugin": "nfs", "fstype": "nfs4",
            "source": f"nas.example.com:/{volume}", "server": "nas.example.com", "export": f"/{volume}",
            "mountPoint": f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~nfs/{volume}", "superblock": "0:91",
            "optionsSource": "mountstats", "effectiveOptions": ["vers=4.1", "hard"]}


def write_report(kube, node: str, volumes: list[dict], failures: list[dict] = (), agent_version: str = "test") -> None:
    spec = {"nodeName": node, "scanTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "agentVersion": agent_version, "networkFstypes": ["nfs4"], "volumes": volumes, "failures": list(failures)}
    put_report(kube, node, spec)


def node_events(kube, node: str, reason: str) -> list[str]:
    return [event.message for event in kube.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}").items]


def events(kube, namespace: str, name: str, reason: str) -> list[str]:
    return [event.message for event in kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={reason}").items]


def test_a_deleted_pod_whose_volume_stays_stuck_is_said_stuck_terminating_by_the_judging_loop(
        cluster, kube, operator, namespace, unique):
    node = cluster.node_names[0]
    name = f"stuck-{unique}"
    kube.core.create_namespaced_pod(namespace, {
        # The finalizer keeps the deleted pod Terminating, as a kubelet does while its volume will not unmount.
        "metadata": {"name": name, "finalizers": ["mountwarden.test/held"]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                 "volumes": [{"name": "data", "nfs": {"server": "nas.example.com", "path": "/stuck"}}]}})
    uid = wait_for(lambda: (pod := kube.core.read_namespaced_pod(name, namespace)).status.phase == "Running"
                   and pod.metadata.uid, timeout=60, what=f"pod {name} Running")
    try:
        kube.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        deadline = wait_for(lambda: kube.core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp,
                            what="the pod Terminating")
        # Written past the pod's deadline, with a failure of the node (its Event says when the report was judged).
        server = f"nas-{unique}.example.com"
        write_report(kube, node, [{**mount_of(uid, "data"), "serverResponding": False,
                                   "stuckProcesses": [{"pid": 4242, "command": "dd", "wchan": "folio_wait_bit_common"}]}],
                     [{"reason": "ServerNotResponding", "severity": "error", "message": f"NFS server {server} does not "
                       "answer", "remedy": "Bring it back.", "pods": [uid], "evidence": {"server": server}}])
        wait_for(lambda: any(server in m for m in node_events(kube, node, "ServerNotResponding")), timeout=30,
                 what="the report judged (the node's ServerNotResponding Event)")
        judged = datetime.now(UTC)
        assert judged < deadline + timedelta(seconds=STUCK_AFTER), \
            "the report was judged only once the pod was stuck: raise STUCK_AFTER, the loop is what this test is about"
        (message,) = wait_for(lambda: events(kube, namespace, name, "StuckTerminating"), timeout=60,
                              what="a StuckTerminating Event on the pod, from the judging loop")
        assert f"pod {namespace}/{name}, deleted to be gone by" in message and "pid 4242 (dd" in message, message
    finally:
        kube.core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
        write_report(kube, node, [])


def test_pods_on_a_stale_handle_are_evicted_only_as_their_budget_allows(cluster, kube, operator, namespace, unique):
    node = cluster.node_names[0]
    profile = f"evict-{unique}"
    kube.apply_profile(profile_body(profile, "coherent", backend={"provisioner": "nfs.csi.k8s.io"},
                                    remediation={"staleFileHandle": "Evict", "windowSeconds": 600}))
    wait_for(lambda: kube.classes_of(profile), what="the profile's class")
    pv = f"pv-{profile}"
    volume_for(kube, namespace, pv, f"{profile}-v1")
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pv}}]}}}})
    policy = kubernetes.client.PolicyV1Api(kube.client)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    old = wait_for(lambda: len(pods := [p for p in kube.core.list_namespaced_pod(namespace, label_selector="app=web")
                                        .items if p.status.phase == "Running"]) == 2 and pods, timeout=60,
                   what="both replicas Running")
    old_uids = {pod.metadata.uid for pod in old}
    stale = [{"reason": "StaleFileHandle", "severity": "error", "message": f"volume {pv} of pod UID {uid}: ESTALE",
              "remedy": "Restart the pod.", "podUid": uid,
              "evidence": {"node": node, "volume": pv, "mountPoint": mount_of(uid, pv)["mountPoint"], "probe": "ESTALE"}}
             for uid in old_uids]
    try:
        write_report(kube, node, [mount_of(uid, pv) for uid in old_uids], stale)
        refused = wait_for(lambda: profile_events(kube, profile, "EvictionRefused"), timeout=60,
                           what="an EvictionRefused Event on the profile")
        assert "web" in refused[0] and "stale file handle" in refused[0], refused
        assert {p.metadata.uid for p in kube.core.list_namespaced_pod(namespace, label_selector="app=web").items} \
            == old_uids  # the budget held

        policy.patch_namespaced_pod_disruption_budget("web", namespace, {"spec": {"minAvailable": 1}})
        evicted = wait_for(lambda: profile_events(kube, profile, "StaleHandleEvicted"), timeout=60,
                           what="a StaleHandleEvicted Event on the profile")
        assert any(pod.metadata.name in evicted[0] for pod in old), evicted
    finally:
        write_report(kube, node, [])
        kube.delete_profile(profile)


def test_a_node_writing_its_report_in_a_loop_is_handled_at_the_pace_and_its_latest_report_is(kube, operator, unique):
    node = f"looping-{unique}"  # a node of its own, so no other test's writes share its pace
    server = f"nas-{unique}.example.com"
    writes = 40
    started = time.monotonic()
    for scan in range(writes):
        # Only the last write says the server is gone: its Event proves the latest report was handled. Each write
        # differs from the one before (scanTime counts whole seconds): a write that changes nothing makes no new
        # version, and the API server sends no event for it.
        write_report(kube, node, [], [] if scan < writes - 1 else [
            {"reason": "ServerNotResponding", "severity": "error", "message": f"NFS server {server} does not answer",
             "remedy": "Bring it back.", "evidence": {"server": server}}], agent_version=f"test-{scan}")
        time.sleep(0.15)  # an agent writing in a loop for a few seconds (this paces the writer: it waits for nothing)
    wait_for(lambda: any(server in m for m in node_events(kube, node, "ServerNotResponding")), timeout=60,
             what="the node's latest report handled (its ServerNotResponding Event)")
    span = time.monotonic() - started  # every write arrived and was handled within it
    samples = scrape(operator.metrics_port)
    handled = samples.get(("mountwarden_report_handlings_total", (("node", node),)), 0)
    coalesced = samples.get(("mountwarden_report_writes_coalesced_total", (("node", node),)), 0)
    # The first write at once, then at most one handling per interval for as long as the writes kept coming.
    assert 2 <= handled <= 2 + span / REPORT_MIN_INTERVAL, (
        f"{handled:.0f} handlings of {writes} writes in {span:.1f} s: not paced at one per {REPORT_MIN_INTERVAL} s")
    # Every write reached the operator once, and each was either handled or coalesced: none lost, none twice.
    assert handled + coalesced == writes, f"{handled:.0f} handled + {coalesced:.0f} coalesced of {writes} writes"
