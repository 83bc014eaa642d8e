"""The chart a user installs, end to end: lint, install, RBAC, the webhooks' scoping, the operator's replicas,
upgrade and uninstall, against a real kube-apiserver.

The tests run in file order on one release: each step starts from where the one before left the cluster.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from e2e.helpers import (
    CHART,
    RELEASE,
    RELEASE_NAMESPACE,
    OperatorRun,
    kubectl_json,
    pod_token,
    pods,
    secret_files,
    token_kubeconfig,
    whoami,
)
from tests.procroot import Mount, assemble_proc_root, pod_uid
from tests.support import free_port, profile_body, wait_for

from mountwarden.adapters.webhookconfig import render_enforcement
from mountwarden.cli.operator import TIE_BREAK_RANGE, tie_break
from mountwarden.core.admission import NODE_NAME_EXTRA, ProfileEntry
from mountwarden.devcluster.cluster import kwok_node

NS = RELEASE_NAMESPACE
OPERATOR_ACCOUNT = f"system:serviceaccount:{NS}:{RELEASE}-operator"
AGENT_ACCOUNT = f"system:serviceaccount:{NS}:{RELEASE}-agent"
ACTIVE = "mountwarden.io/active"
CRDS = ("storageprofiles.mountwarden.io", "nodemountreports.mountwarden.io", "clusterkopfpeerings.kopf.dev")


@pytest.fixture(scope="module")
def release(cluster) -> subprocess.CompletedProcess:
    """`helm install`, as a user runs it: the chart's CRDs, then every object, waiting for the pods."""
    if cluster.helm("status", RELEASE, "-n", NS, check=False).returncode == 0:  # left by an interrupted run
        cluster.helm("uninstall", RELEASE, "-n", NS, "--wait")
    installed = cluster.helm("install", RELEASE, str(CHART), "-n", NS, "--create-namespace", "--wait",
                             "--timeout", "180s")
    yield installed
    if cluster.helm("status", RELEASE, "-n", NS, check=False).returncode == 0:
        cluster.helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)
    cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)


def manifest(cluster) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(cluster.helm("get", "manifest", RELEASE, "-n", NS).stdout) if doc]


def exists(cluster, doc: dict) -> bool:
    namespace = ["-n", doc["metadata"]["namespace"]] if doc["metadata"].get("namespace") else []
    kind = f"{doc['kind'].lower()}.{doc['apiVersion'].split('/')[0]}" if "/" in doc["apiVersion"] else doc["kind"]
    result = cluster.kubectl("get", kind, doc["metadata"]["name"], *namespace, "-o", "name", check=False)
    assert result.returncode == 0 or "NotFound" in result.stderr, result.stderr
    return result.returncode == 0


def test_the_chart_lints(cluster):
    result = cluster.helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout


def test_every_object_is_created_and_valid_to_the_api_server(cluster, release):
    docs = manifest(cluster)
    assert len(docs) >= 18
    # Strict server-side validation of every manifest: an unknown or duplicated field is an error, not a warning.
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "--force-conflicts",
                    "--field-manager=e2e-validation", "-f", "-", input=yaml.safe_dump_all(docs))
    missing = [f"{d['kind']}/{d['metadata']['name']}" for d in docs if not exists(cluster, d)]
    assert not missing
    for crd in CRDS:
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
    # NOTES.txt tells what to do next.
    assert "kubectl get sprof,sc" in release.stdout and f"{RELEASE}-operator-metrics.{NS}.svc:9800" in release.stdout


def test_two_operator_replicas_and_an_agent_on_every_node_run(cluster, release):
    deployment = kubectl_json(cluster, "get", "deployment", f"{RELEASE}-operator", "-n", NS)
    assert deployment["status"]["readyReplicas"] == 2
    daemonset = kubectl_json(cluster, "get", "daemonset", f"{RELEASE}-agent", "-n", NS)
    assert daemonset["status"]["numberReady"] == daemonset["status"]["desiredNumberScheduled"] == len(cluster.node_names)
    agents = pods(cluster, "agent")
    assert sorted(pod["spec"]["nodeName"] for pod in agents) == sorted(cluster.node_names)
    assert all(pod["status"]["phase"] == "Running" for pod in [*agents, *pods(cluster, "operator")])


def test_no_agent_is_sent_to_a_fargate_virtual_or_control_plane_node(cluster, release, request):
    """Nodes labelled as EKS Fargate or virtual-kubelet get no agent pod (one would stay Pending for ever), nor a
    control-plane node (agent.controlPlaneNodes is false by default); a plain node added at the same time gets
    one, so the DaemonSet controller has seen all four."""
    added = {"e2e-fargate": {"eks.amazonaws.com/compute-type": "fargate"},
             "e2e-virtual": {"type": "virtual-kubelet"},
             "e2e-control-plane": {"node-role.kubernetes.io/control-plane": ""}, "e2e-plain": {}}

    def remove() -> None:  # and the plain node's agent with it, before the next test counts agents
        cluster.kubectl("delete", "node", *added, "--ignore-not-found", check=False)
        # What the pod garbage collector would do, only after a node has been gone 40 s (a minute in all, here).
        left = [pod["metadata"]["name"] for pod in pods(cluster, "agent") if pod["spec"].get("nodeName") in added]
        if left:
            cluster.kubectl("delete", "pod", *left, "-n", NS, "--force", "--grace-period=0", "--ignore-not-found",
                            check=False)
        wait_for(lambda: not {pod["spec"].get("nodeName") for pod in pods(cluster, "agent")} & set(added),
                 timeout=180, what="no agent left on the removed nodes")

    request.addfinalizer(remove)
    for index, (name, labels) in enumerate(added.items()):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(kwok_node(name, 900 + index, labels)))
    wait_for(lambda: any(pod["spec"].get("nodeName") == "e2e-plain" for pod in pods(cluster, "agent")),
             timeout=120, what="an agent pod on the plain node")
    on = {pod["spec"].get("nodeName") for pod in pods(cluster, "agent")}
    assert not {"e2e-fargate", "e2e-virtual", "e2e-control-plane"} & on, on
    daemonset = kubectl_json(cluster, "get", "daemonset", f"{RELEASE}-agent", "-n", NS)
    assert daemonset["status"]["desiredNumberScheduled"] == len(cluster.node_names) + 1


def can_i(cluster, account: str, *request: str) -> bool:
    result = cluster.kubectl("auth", "can-i", *request, f"--as={account}", check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    return result.stdout.strip() == "yes"


OPERATOR_MAY = [
    ("get", "storageprofiles.mountwarden.io/any"),
    ("watch", "storageprofiles.mountwarden.io"),
    ("patch", "storageprofiles.mountwarden.io"),
    ("patch", "storageprofiles.mountwarden.io", "--subresource=status"),
    ("watch", "nodemountreports.mountwarden.io"),
    ("create", "networkfilesystems.mountwarden.io"),
    ("patch", "networkfilesystems.mountwarden.io"),
    ("delete", "networkfilesystems.mountwarden.io"),
    ("create", "storageclasses.storage.k8s.io"),
    ("delete", "storageclasses.storage.k8s.io"),
    ("patch", "persistentvolumes"),
    ("watch", "persistentvolumeclaims", "--all-namespaces"),
    ("watch", "pods", "--all-namespaces"),
    ("watch", "nodes"),
    ("create", "pods", "--subresource=eviction", "-n", "default"),
    ("list", "poddisruptionbudgets.policy", "--all-namespaces"),
    ("patch", "pods", "-n", NS),
    ("create", "events", "-n", "default"),
    ("patch", "deployments.apps", "-n", "default"),
    ("patch", "statefulsets.apps", "-n", "default"),
    ("list", "replicasets.apps", "--all-namespaces"),
    ("list", "jobs.batch", "--all-namespaces"),
    ("list", "horizontalpodautoscalers.autoscaling", "--all-namespaces"),
    ("watch", "clusterkopfpeerings.kopf.dev"),
    ("patch", f"clusterkopfpeerings.kopf.dev/{RELEASE}"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", f"validatingwebhookconfigurations.admissionregistration.k8s.io/{RELEASE}-enforce"),
]
OPERATOR_MAY_NOT = [
    ("get", "secrets", "-n", NS),
    ("list", "secrets", "--all-namespaces"),
    ("create", "pods", "--subresource=exec", "-n", "default"),
    ("create", "pods", "--subresource=exec", "-n", NS),
    ("patch", "pods", "-n", "default"),
    ("delete", "pods", "-n", "default"),
    ("create", "pods", "-n", "default"),
    ("update", "deployments.apps", "-n", "default"),
    ("create", "nodemountreports.mountwarden.io"),
    ("delete", "storageprofiles.mountwarden.io"),
    ("update", "networkfilesystems.mountwarden.io"),
    ("get", "nodes"),
    ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("patch", f"validatingwebhookconfigurations.admissionregistration.k8s.io/{RELEASE}"),
    ("delete", f"validatingwebhookconfigurations.admissionregistration.k8s.io/{RELEASE}-enforce"),
    ("patch", "clusterkopfpeerings.kopf.dev/someone-else"),
    ("create", "serviceaccounts", "--subresource=token", "-n", NS),
    ("bind", "clusterroles.rbac.authorization.k8s.io"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
]
AGENT_MAY = [
    ("get", "nodes/node-a"),
    # agent.namePods (the default): RBAC cannot scope the watch of its node's pods to that node.
    ("list", "pods", "--all-namespaces"),
    ("watch", "pods", "--all-namespaces"),
    ("get", "persistentvolumeclaims", "-n", NS),
    ("get", "nodemountreports.mountwarden.io/node-a"),
    ("create", "nodemountreports.mountwarden.io"),
    ("update", "nodemountreports.mountwarden.io/node-a"),
]
AGENT_MAY_NOT = [
    ("get", "pods", "-n", NS),
    ("list", "persistentvolumeclaims", "--all-namespaces"),
    ("list", "nodes"),
    ("list", "nodemountreports.mountwarden.io"),
    ("patch", "nodemountreports.mountwarden.io/node-a"),
    ("delete", "nodemountreports.mountwarden.io/node-a"),
    ("get", "secrets", "-n", NS),
    ("patch", "nodes/node-a"),
]


def test_the_operator_may_do_what_it_needs_and_nothing_else(cluster, release):
    assert [r for r in OPERATOR_MAY if not can_i(cluster, OPERATOR_ACCOUNT, *r)] == []
    assert [r for r in OPERATOR_MAY_NOT if can_i(cluster, OPERATOR_ACCOUNT, *r)] == []


def test_the_agent_may_write_reports_and_read_nodes_only(cluster, release):
    assert [r for r in AGENT_MAY if not can_i(cluster, AGENT_ACCOUNT, *r)] == []
    assert [r for r in AGENT_MAY_NOT if can_i(cluster, AGENT_ACCOUNT, *r)] == []


def report(name: str) -> dict:
    return {"apiVersion": "mountwarden.io/v1alpha1", "kind": "NodeMountReport", "metadata": {"name": name},
            "spec": {"nodeName": name, "scanTime": "2026-01-01T00:00:00Z", "agentVersion": "e2e",
                     "networkFstypes": ["nfs4"]}}


def test_with_no_operator_answering_only_the_agents_reports_and_deny_profiles_claims_are_refused(cluster, release, namespace,
                                                                                                tmp_path):
    """The webhooks are live in the API server, and no operator serves them here (kwok runs no process)."""
    endpoints = kubectl_json(cluster, "get", "endpointslices", "-n", NS, "-l",
                             f"kubernetes.io/service-name={RELEASE}-webhook")["items"]
    assert not [e for slice_ in endpoints for e in slice_.get("endpoints") or []]  # no replica is active
    # failurePolicy Ignore: PVCs and profiles go through.
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(claim))
    # Administrators' writes of reports never call the webhook (its matchCondition names the agent).
    cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(report("e2e-admin")))
    # The agent's: an impersonated agent's token names no node, and the API server's own policy refuses it before
    # any webhook is called (ValidatingAdmissionPolicies run first)...
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", f"--as={AGENT_ACCOUNT}",
                              input=json.dumps(report(cluster.node_names[0])), check=False)
    assert refused.returncode != 0
    assert f"ValidatingAdmissionPolicy '{RELEASE}-agent-reports'" in refused.stderr
    # ...and an agent pod's own token, for its own node's report, passes the policy and calls the webhook, which
    # fails closed.
    agent = pods(cluster, "agent")[0]
    kubeconfig = token_kubeconfig(cluster, tmp_path / "agent.kubeconfig", pod_token(cluster, NS, f"{RELEASE}-agent", agent))
    refused = subprocess.run([str(cluster.kubectl_path), f"--kubeconfig={kubeconfig}", "create", "--dry-run=server",
                              "-f", "-"], input=json.dumps(report(agent["spec"]["nodeName"])), capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode != 0
    assert 'failed calling webhook "nodemountreport.mountwarden.io"' in refused.stderr

    # A deny profile's webhook, as the active replica writes it (its field manager, failurePolicy Fail): the
    # claims that profile governs are refused while no replica answers; nobody else's.
    guarded = ProfileEntry("e2e-down", "nfs.csi.k8s.io", enforcement="deny",
                           pvc_selector={"matchLabels": {"app": "e2e-down"}})
    service = {"service": {"namespace": NS, "name": f"{RELEASE}-webhook", "port": 443}}
    enforce = render_enforcement(service, name=f"{RELEASE}-enforce", excluded=["kube-system", NS], enforcing=[guarded])
    cluster.kubectl("apply", "--server-side", "--field-manager=mountwarden", "--force-conflicts", "-f", "-",
                    input=json.dumps(enforce))
    try:
        governed = {**claim, "metadata": {**claim["metadata"], "labels": {"app": "e2e-down"}}}

        def refused_while_down() -> subprocess.CompletedProcess | None:
            result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(governed), check=False)
            return result if result.returncode != 0 else None

        # The API server reads webhook configurations through its own informer: called once it has caught up.
        refused = wait_for(refused_while_down, timeout=120, what="the API server calling the new Fail webhook")
        assert 'failed calling webhook "e2e-down.enforce.mountwarden.io"' in refused.stderr, refused.stderr
        cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(claim))
    finally:
        cluster.kubectl("apply", "--server-side", "--field-manager=mountwarden", "--force-conflicts", "-f", "-",
                        input=json.dumps({**enforce, "webhooks": []}))


def run_agent(kubeconfig: Path, proc_root: Path, node: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mountwarden", "agent", "--once", "--node-name", node, "--proc-root", str(proc_root),
         "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=120)


def test_an_agent_writes_only_its_own_nodes_report(cluster, release, namespace, operators, tmp_path):
    """A pod's token names its node; the operator's webhook holds the chart's agent role to that node.

    The chart's own agent account is served through the Service, which this machine's operator is not behind:
    this test gives an account of its own the chart's agent ClusterRole, and runs the operator with
    --webhook-mode local and that account.
    """
    node, other = cluster.node_names[0], cluster.node_names[1]
    # Reports other tests of the session left behind would make the agent's create fail.
    cluster.kubectl("delete", "nodemountreport", node, other, "--ignore-not-found")
    cluster.kubectl("create", "serviceaccount", "node-agent", "-n", namespace)
    binding = f"{namespace}-node-agent"
    cluster.kubectl("create", "clusterrolebinding", binding, f"--clusterrole={RELEASE}-agent",
                    f"--serviceaccount={namespace}:node-agent")
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", "namespace": namespace},
            "spec": {"serviceAccountName": "node-agent", "nodeName": node,
                     "containers": [{"name": "agent", "image": "registry.invalid/mountwarden:e2e"}]}}))
        pod = wait_for(lambda: (p := kubectl_json(cluster, "get", "pod", "agent", "-n", namespace))["status"].get(
            "phase") == "Running" and p, what="the agent pod Running")
        kubeconfig = token_kubeconfig(cluster, tmp_path / "agent.kubeconfig",
                                      pod_token(cluster, namespace, "node-agent", pod))
        # What the check rests on: the API server names the pod's node in the token's user info.
        assert whoami(cluster, kubeconfig)["extra"][NODE_NAME_EXTRA] == [node]

        operators.append(OperatorRun(
            ["--kubeconfig", str(cluster.kubeconfig), "--webhook-mode", "local", "--metrics-port", "0",
             "--agent-service-account", f"{namespace}:node-agent"], {}, tmp_path / "operator.log"))
        as_agent = [f"--kubeconfig={kubeconfig}", "create", "--dry-run=server", "-f", "-"]
        wait_for(lambda: subprocess.run([str(cluster.kubectl_path), *as_agent], input=json.dumps(report(node)),
                                        capture_output=True, text=True, timeout=60).returncode == 0,
                 timeout=120, what="the operator's webhook admitting the agent's own report")

        proc_root = assemble_proc_root(tmp_path / "proc", [Mount("pv-e2e", pod_uid=pod_uid("e2e"))]).path
        own = run_agent(kubeconfig, proc_root, node)
        assert own.returncode == 0, own.stderr
        assert kubectl_json(cluster, "get", "nodemountreport", node)["spec"]["nodeName"] == node

        foreign = run_agent(kubeconfig, proc_root, other)
        assert foreign.returncode == 1
        assert f"runs on node {node} and may write only NodeMountReport {node}, not {other}" in foreign.stderr
        assert cluster.kubectl("get", "nodemountreport", other, check=False).returncode != 0
        operators[0].assert_running()
    finally:
        cluster.kubectl("delete", "nodemountreport", node, "--ignore-not-found")
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")


def active_pods(cluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods(cluster, "operator")
                  if (p["metadata"].get("labels") or {}).get(ACTIVE) == "true")


def replica_args(deployment: dict, cert_dir: Path) -> list[str]:
    """The installed Deployment's arguments, with this machine's ports and the Secret's files."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    local = {"--liveness": f"http://127.0.0.1:{free_port()}/healthz", "--metrics-port": "0",
             "--webhook-port": str(free_port()), "--webhook-cert-dir": str(cert_dir)}
    args = []
    for arg in container["args"][1:]:
        name = arg.split("=", 1)[0]
        args.append(f"{name}={local[name]}" if name in local else arg)
    return args


def test_one_replica_answers_and_the_standby_takes_over(cluster, release, operators, tmp_path):
    """The operator as the chart runs it: each kwok pod's name, its service account's token, the Deployment's args."""
    deployment = kubectl_json(cluster, "get", "deployment", f"{RELEASE}-operator", "-n", NS)
    ca_bundle = kubectl_json(cluster, "get", "secret", f"{RELEASE}-webhook-tls", "-n", NS)["data"]["ca.crt"]
    cert_dir = secret_files(cluster, f"{RELEASE}-webhook-tls", tmp_path / "certs")
    replicas = {pod["metadata"]["name"]: pod for pod in pods(cluster, "operator")}
    assert len(replicas) == 2
    runs = {}
    for name, pod in replicas.items():
        kubeconfig = token_kubeconfig(cluster, tmp_path / f"{name}.kubeconfig",
                                      pod_token(cluster, NS, f"{RELEASE}-operator", pod))
        runs[name] = OperatorRun(["--kubeconfig", str(kubeconfig), *replica_args(deployment, cert_dir)],
                                 {"POD_NAME": name, "POD_ID": name, "POD_NAMESPACE": NS}, tmp_path / f"{name}.log",
                                 restart_stood_down=True)
        operators.append(runs[name])

    # Each replica derives its own priority from its start (the earlier the higher), ties broken by its pod name;
    # the highest is active and labels its pod. The two start together: which reads the clock first is theirs to say.
    peers = wait_for(lambda: (s := kubectl_json(cluster, "get", f"clusterkopfpeering.kopf.dev/{RELEASE}").get("status")
                              or {}) and all(s.get(name) for name in replicas) and s, what="both replicas' peering entries")
    assert {name: peers[name]["priority"] % TIE_BREAK_RANGE for name in replicas} == {
        name: tie_break(name) for name in replicas}
    expected = max(replicas, key=lambda name: peers[name]["priority"])
    standby = next(name for name in replicas if name != expected)
    assert wait_for(lambda: active_pods(cluster) == [expected] and active_pods(cluster), timeout=120,
                    what=f"{expected} alone labelled {ACTIVE}")
    ip = kubectl_json(cluster, "get", "pod", expected, "-n", NS)["status"]["podIP"]
    wait_for(lambda: [a for s in kubectl_json(cluster, "get", "endpointslices", "-n", NS, "-l",
                                              f"kubernetes.io/service-name={RELEASE}-webhook")["items"]
                      for e in s.get("endpoints") or [] for a in e["addresses"]] == [ip],
             what="the webhook Service routing to the active replica alone")

    # A deny profile: the active replica (as the chart's service account) makes its class and its Fail webhook.
    profile = profile_body("e2e-guarded", "staging", provisioner="nfs.csi.k8s.io",
                           parameters={"server": "nfs.example.internal", "share": "/exports"}, enforcement="deny",
                           consumers={"pvcSelector": {"matchLabels": {"app": "e2e-guarded"}}})
    cluster.kubectl("apply", "-f", "-", input=json.dumps(profile))
    try:
        wait_for(lambda: cluster.kubectl("get", "storageclass", "e2e-guarded-v1", check=False).returncode == 0,
                 timeout=120, what="StorageClass e2e-guarded-v1")

        def enforced() -> list[dict]:
            body = kubectl_json(cluster, "get", "validatingwebhookconfiguration", f"{RELEASE}-enforce")
            return body.get("webhooks") or []

        (hook,) = wait_for(enforced, what="the deny profile's webhook")
        assert hook["name"] == "e2e-guarded.enforce.mountwarden.io" and hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"] == {"service": {"namespace": NS, "name": f"{RELEASE}-webhook", "path": "/pvc",
                                                    "port": 443}, "caBundle": ca_bundle}

        # The active replica leaves: the standby takes over, and its pod alone carries the label.
        runs[expected].stop(signal.SIGTERM)
        wait_for(lambda: active_pods(cluster) == [standby], timeout=120, what=f"{standby} taking over")
        runs[standby].assert_running()
    finally:
        cluster.kubectl("delete", "storageprofile", "e2e-guarded", "--ignore-not-found", "--timeout=120s")
    wait_for(lambda: enforced() == [], what="the deleted profile's webhook to go")
    runs[standby].stop(signal.SIGTERM)
    wait_for(lambda: active_pods(cluster) == [], what="the label to go with the last replica")
    for run in runs.values():
        assert "forbidden" not in run.logs().lower(), run.logs()[-4000:]


def test_an_upgrade_rolls_the_agents_and_keeps_the_certificate_and_the_deny_webhooks(cluster, release):
    def state():
        return {
            "secret": kubectl_json(cluster, "get", "secret", f"{RELEASE}-webhook-tls", "-n", NS)["data"],
            "ca": [h["clientConfig"]["caBundle"] for h in kubectl_json(
                cluster, "get", "validatingwebhookconfiguration", RELEASE)["webhooks"]],
            "operator": kubectl_json(cluster, "get", "deployment", f"{RELEASE}-operator", "-n", NS)["metadata"][
                "generation"],
            "agent": kubectl_json(cluster, "get", "daemonset", f"{RELEASE}-agent", "-n", NS)["metadata"]["generation"],
        }

    # A deny webhook as the active operator writes it (server-side apply, its field manager): Helm must keep it.
    enforce = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": f"{RELEASE}-enforce"},
               "webhooks": [{"name": "kept.enforce.mountwarden.io", "failurePolicy": "Fail", "sideEffects": "None",
                             "admissionReviewVersions": ["v1"], "timeoutSeconds": 3,
                             "objectSelector": {"matchLabels": {"app": "nothing-has-this"}},
                             "clientConfig": {"service": {"namespace": NS, "name": f"{RELEASE}-webhook",
                                                          "path": "/pvc", "port": 443}},
                             "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                        "resources": ["persistentvolumeclaims"]}]}]}
    cluster.kubectl("apply", "--server-side", "--field-manager=mountwarden", "--force-conflicts", "-f", "-",
                    input=json.dumps(enforce))
    before = state()
    cluster.helm("upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values", "--set", "agent.interval=60",
                 "--wait", "--timeout", "180s")
    after = state()
    assert after["secret"] == before["secret"] and after["ca"] == before["ca"]  # the chart's CA is kept
    assert after["operator"] == before["operator"]  # nothing of the operator changed
    assert after["agent"] == before["agent"] + 1

    def upgraded_agents() -> list[dict] | None:
        agents = pods(cluster, "agent")
        return agents if len(agents) == len(cluster.node_names) and all(
            "--interval=60" in p["spec"]["containers"][0]["args"] and p["status"]["phase"] == "Running"
            for p in agents) else None

    # helm's --wait lets a DaemonSet's rollout end with maxUnavailable replicas still on their way.
    wait_for(upgraded_agents, timeout=120, what="one upgraded agent Running on every node")
    hooks = kubectl_json(cluster, "get", "validatingwebhookconfiguration", f"{RELEASE}-enforce").get("webhooks")
    assert [h["name"] for h in hooks or []] == ["kept.enforce.mountwarden.io"]
    # The certificate the chart made serves the Service name and is signed by the CA in the caBundle.
    from cryptography import x509

    ca = x509.load_pem_x509_certificate(base64.b64decode(after["secret"]["ca.crt"]))
    x509.load_pem_x509_certificate(base64.b64decode(after["secret"]["tls.crt"])).verify_directly_issued_by(ca)


def test_uninstall_removes_the_release_and_keeps_the_crds(cluster, release):
    docs = manifest(cluster)
    cluster.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "180s")
    left = wait_for(lambda: not [d for d in docs if exists(cluster, d)], timeout=120,
                    what="every object of the release to be deleted")
    assert left
    for crd in CRDS:  # as Helm does: CRDs outlive the release, and with them the users' profiles
        cluster.kubectl("get", "crd", crd)
