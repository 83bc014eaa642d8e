"""The rights the API server itself enforces on the chart's service accounts, with no operator running.

The chart's RBAC, its ValidatingAdmissionPolicies and their bindings (and the empty -enforce configuration they
guard) are rendered by `helm template` and applied alone: no operator, no webhook Service behind which anything
answers. The operator and the agent act through tokens of pods bound to their service accounts, as the kubelet
gives them (the agent's names its node, authentication.kubernetes.io/node-name; the operator's its pod). Each
intended change is made with the operator's or the agent's own code (the bodies their handlers send), each
forbidden one is refused with the policy's message, and the same forbidden change by an administrator goes
through: the policies bind the two identities, nobody else. docs/security.md's matrix names these tests.
"""

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client import ApiException
from tests.support import wait_for

from mountwarden.adapters.webhookconfig import (
    EXEMPT_LABEL,
    WebhookRegistrar,
    excluded_namespaces,
    render_enforcement,
)
from mountwarden.agent.report import ReportWriter, WriteOutcome
from mountwarden.api.nodemountreport import NodeMountReportSpec
from mountwarden.core.admission import ProfileEntry
from mountwarden.core.rollout.actions import PatchVolume, ReleaseVolume, RestartWorkload
from mountwarden.core.rollout.world import WorkloadRef
from mountwarden.core.vocabulary import Enforcement

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "mountwarden"
#: What is applied of the rendered chart: the rights and the policies that narrow them.
APPLIED_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
ACTIVE = "mountwarden.io/active"
GROUP, VERSION, REPORTS = "mountwarden.io", "v1alpha1", "nodemountreports"


@dataclass
class Release:
    name: str
    namespace: str
    fullname: str
    #: Namespace of the workloads the operator restarts (any namespace: its ClusterRole).
    workloads: str
    admin: kubernetes.client.ApiClient
    operator: kubernetes.client.ApiClient
    #: Another operator pod, labelled by nobody.
    other_pod: str
    operator_pod: str
    agent: kubernetes.client.ApiClient
    agent_node: str
    #: An agent token bound to no pod: it names no node.
    unbound_agent: kubernetes.client.ApiClient

    @property
    def enforce(self) -> str:
        return f"{self.fullname}-enforce"

    @property
    def policy(self) -> Callable[[str], str]:
        return lambda suffix: f"{self.fullname}-{suffix}"


def exempt_namespace(release: str) -> str:
    """The namespace the release's webhook.exemptNamespaces names (it need not exist)."""
    return f"{release}-exempt"


def token_client(cluster, token: str) -> kubernetes.client.ApiClient:
    """A client that authenticates with ``token`` alone (the admin kubeconfig also carries a client certificate)."""
    admin = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=admin)
    config = kubernetes.client.Configuration()
    config.host, config.ssl_ca_cert, config.verify_ssl = admin.host, admin.ssl_ca_cert, admin.verify_ssl
    config.api_key = {"authorization": f"Bearer {token}"}
    return kubernetes.client.ApiClient(config)


def pod_token(cluster, namespace: str, account: str, pod: str | None) -> str:
    """A token as the kubelet gives a pod (bound to it: its node and pod in the user's extra), or an unbound one."""
    bound = []
    if pod is not None:
        uid = cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
        bound = ["--bound-object-kind=Pod", f"--bound-object-name={pod}", f"--bound-object-uid={uid}"]
    return cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h", *bound).stdout.strip()


def make_pod(cluster, namespace: str, name: str, account: str, node: str, labels: dict | None = None) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"serviceAccountName": account, "nodeName": node,
                 "containers": [{"name": "main", "image": "registry.invalid/mountwarden:test"}]}}))


def refusal(call: Callable[[], object]) -> ApiException | None:
    """The API server's refusal of ``call``, or None if it went through."""
    try:
        call()
    except ApiException as error:
        return error
    return None


def assert_refused_by(call: Callable[[], object], policy: str, message: str, what: str = "") -> None:
    """Refused by the ValidatingAdmissionPolicy ``policy`` (422, its binding of the same name), saying ``message``."""
    error = refusal(call)
    assert error is not None, f"expected {policy} to refuse {what or 'this'}, but the API server allowed it"
    body = json.loads(error.body)["message"]
    assert error.status == 422, body
    assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request" in body, body
    assert message in body, body


@pytest.fixture(scope="module")
def release(cluster, crds_installed) -> Iterator[Release]:
    suffix = uuid.uuid4().hex[:6]
    name, namespace, workloads = f"rights-{suffix}", f"mw-rights-{suffix}", f"mw-workloads-{suffix}"
    fullname = f"{name}-mountwarden"
    # One exempt namespace: the operator's deny webhooks must leave it out (the operator-enforce policy).
    rendered = cluster.helm("template", name, str(CHART), "--namespace", namespace,
                            "--set", f"webhook.exemptNamespaces={{{exempt_namespace(name)}}}").stdout
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    applied = [doc for doc in docs if doc["kind"] in APPLIED_KINDS
               or (doc["kind"] == "ValidatingWebhookConfiguration" and doc["metadata"]["name"] == f"{fullname}-enforce")]
    assert {doc["kind"] for doc in applied} == APPLIED_KINDS | {"ValidatingWebhookConfiguration"}
    for created in (namespace, workloads):
        cluster.kubectl("create", "namespace", created)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(applied))
    admin = cluster.api_client()
    node = cluster.node_names[0]
    try:
        wait_for(lambda: subprocess.run(
            [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", "get", "serviceaccount",
             f"{fullname}-operator", "-n", namespace], capture_output=True).returncode == 0, what="the accounts")
        make_pod(cluster, namespace, "operator-a", f"{fullname}-operator", node)
        make_pod(cluster, namespace, "operator-b", f"{fullname}-operator", cluster.node_names[1])
        make_pod(cluster, namespace, "agent", f"{fullname}-agent", node)
        handle = Release(
            name=name, namespace=namespace, fullname=fullname, workloads=workloads, admin=admin,
            operator=token_client(cluster, pod_token(cluster, namespace, f"{fullname}-operator", "operator-a")),
            operator_pod="operator-a", other_pod="operator-b",
            agent=token_client(cluster, pod_token(cluster, namespace, f"{fullname}-agent", "agent")),
            agent_node=node,
            unbound_agent=token_client(cluster, pod_token(cluster, namespace, f"{fullname}-agent", None)),
        )
        wait_until_enforced(cluster, handle)
        yield handle
    finally:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies", "clusterrolebindings",
                     "clusterroles", "validatingwebhookconfigurations"):
            cluster.kubectl("delete", kind, "-l", f"app.kubernetes.io/instance={name}", "--ignore-not-found")
        cluster.kubectl("delete", "pv", f"probe-{name}", "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", "namespace", namespace, workloads, "--wait=false")


def wait_until_enforced(cluster, release: Release) -> None:
    """The API server loads policies and bindings asynchronously (an informer each): wait until every policy
    refuses a dry run of a change it forbids, on objects made for that alone."""
    probe = f"probe-{release.name}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(workload("Deployment", probe, release.workloads)))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(volume(probe, release.name)))
    core, apps = kubernetes.client.CoreV1Api(release.operator), kubernetes.client.AppsV1Api(release.operator)
    admission = kubernetes.client.AdmissionregistrationV1Api(release.operator)
    labelled = {"metadata": {"labels": {"example.com/probe": "x"}}}
    probes = {
        "operator-workloads": lambda: apps.patch_namespaced_deployment(probe, release.workloads, labelled,
                                                                       dry_run="All"),
        "operator-volumes": lambda: core.patch_persistent_volume(probe, labelled, dry_run="All"),
        "operator-pods": lambda: core.patch_namespaced_pod(
            release.other_pod, release.namespace, {"metadata": {"labels": {ACTIVE: "true"}}}, dry_run="All"),
        "operator-enforce": lambda: admission.patch_validating_webhook_configuration(
            release.enforce, labelled, dry_run="All"),
        "agent-reports": lambda: kubernetes.client.CustomObjectsApi(release.unbound_agent).create_cluster_custom_object(
            GROUP, VERSION, REPORTS, report("nobody"), dry_run="All"),
    }
    for suffix, call in probes.items():
        wait_for(lambda call=call, suffix=suffix: (e := refusal(call)) is not None and
                 f"'{release.policy(suffix)}'" in (e.body or ""), timeout=60, what=f"policy {suffix} enforced")


def report(node: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeMountReport", "metadata": {"name": node},
            "spec": {"nodeName": node, "scanTime": datetime.now(UTC).isoformat(), "agentVersion": "test",
                     "networkFstypes": ["nfs4"], **spec}}


def spec_for(node: str) -> NodeMountReportSpec:
    return NodeMountReportSpec.model_validate({
        "nodeName": node, "scanTime": datetime.now(UTC).isoformat(), "agentVersion": "test",
        "networkFstypes": ["nfs4"]})


# -- workloads: the restart annotations of the pod template, nothing else -------------------------------------------

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def workload(kind: str, name: str, namespace: str) -> dict:
    labels = {"app": name}
    template = {"metadata": {"labels": labels, "annotations": {"example.com/team": "storage"}},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}
    spec: dict = {"selector": {"matchLabels": labels}, "template": template}
    if kind != "DaemonSet":
        spec["replicas"] = 1
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_the_operator_may_only_restart_a_workload(cluster, release, kind):
    name = kind.lower()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(workload(kind, name, release.workloads)))
    patchers = {"Deployment": "patch_namespaced_deployment", "StatefulSet": "patch_namespaced_stateful_set",
                "DaemonSet": "patch_namespaced_daemon_set"}
    as_operator = getattr(kubernetes.client.AppsV1Api(release.operator), patchers[kind])
    as_admin = getattr(kubernetes.client.AppsV1Api(release.admin), patchers[kind])
    reader = getattr(kubernetes.client.AppsV1Api(release.admin), patchers[kind].replace("patch_", "read_"))
    policy = release.policy("operator-workloads")
    message = "may change only the restart annotations (mountwarden.io/restarted-for"

    # What a rollout sends (RestartWorkload, guarded by the version it read): allowed.
    # The controller's status writes move the version on: a 409 is the guard working, and the operator tries again.
    def restart() -> bool:
        version = reader(name, release.workloads).metadata.resource_version
        body = RestartWorkload(WorkloadRef(kind, release.workloads, name), version, "efs-v2",
                               "2026-12-02T12:00:00Z").body()
        error = refusal(lambda: as_operator(name, release.workloads, body))
        if error is not None and error.status != 409:
            raise error
        return error is None

    wait_for(restart, what=f"the restart of {kind} {name} without a conflict")
    annotations = reader(name, release.workloads).spec.template.metadata.annotations
    assert annotations["mountwarden.io/restarted-for"] == "efs-v2"

    forbidden = {
        "the image": {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "evil:1"}]}}}},
        "a template label": {"spec": {"template": {"metadata": {"labels": {"extra": "x"}}}}},
        "another template annotation": {"spec": {"template": {"metadata": {"annotations": {"example.com/team": "x"}}}}},
        "the restart annotations and the image together": {"spec": {"template": {
            "metadata": {"annotations": {"mountwarden.io/restarted-at": "2026-12-02T13:00:00Z"}},
            "spec": {"containers": [{"name": "main", "image": "evil:1"}]}}}},
        "the workload's labels": {"metadata": {"labels": {"example.com/owner": "mountwarden"}}},
        "a finalizer": {"metadata": {"finalizers": ["example.com/block"]}},
        "the spec beside the template": ({"spec": {"minReadySeconds": 30}}),
    }
    for what, body in forbidden.items():
        assert_refused_by(lambda body=body: as_operator(name, release.workloads, body), policy, message, what)
    assert reader(name, release.workloads).spec.template.spec.containers[0].image == "registry.invalid/app:1"
    # The policy binds the operator only: an administrator's same change goes through.
    as_admin(name, release.workloads, forbidden["the image"])


def volume(name: str, release: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/instance": release},
                         "annotations": {"example.com/team": "storage"}},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Retain", "mountOptions": ["vers=4.1"],
                     "nfs": {"server": "fs.example.com", "path": "/"}}}


# -- PersistentVolumes: mountOptions and mountwarden.io/ annotations ------------------------------------------------

def test_the_operator_may_only_set_a_volumes_mount_options_and_its_annotations(cluster, release):
    name = f"pv-{release.name}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(volume(name, release.name)))
    try:
        core = kubernetes.client.CoreV1Api(release.operator)
        admin = kubernetes.client.CoreV1Api(release.admin)
        # What a rollout and an adoption send, and what releasing an adopted volume sends: allowed.
        core.patch_persistent_volume(name, PatchVolume(name, ("vers=4.1", "noresvport"), ("vers=4.1",), "efs-v2",
                                                       adopted_by="efs").body())
        stored = admin.read_persistent_volume(name)
        assert stored.spec.mount_options == ["vers=4.1", "noresvport"]
        assert stored.metadata.annotations["mountwarden.io/adopted-by"] == "efs"
        core.patch_persistent_volume(name, ReleaseVolume(name).body())
        assert "mountwarden.io/adopted-by" not in admin.read_persistent_volume(name).metadata.annotations

        policy = release.policy("operator-volumes")
        message = "may change only a PersistentVolume's spec.mountOptions and its mountwarden.io/"
        forbidden = {
            "the reclaim policy": {"spec": {"persistentVolumeReclaimPolicy": "Delete"}},
            "the claimRef": {"spec": {"claimRef": {"namespace": "victim", "name": "data"}}},
            "the capacity": {"spec": {"capacity": {"storage": "2Gi"}}},
            "the mount options and the reclaim policy together": {
                "spec": {"mountOptions": ["vers=4.0"], "persistentVolumeReclaimPolicy": "Delete"}},
            "another annotation": {"metadata": {"annotations": {"example.com/team": "x"}}},
            "a label": {"metadata": {"labels": {"example.com/owner": "mountwarden"}}},
            "a finalizer": {"metadata": {"finalizers": ["example.com/block"]}},
        }
        for what, body in forbidden.items():
            assert_refused_by(lambda body=body: core.patch_persistent_volume(name, body), policy, message, what)
        assert admin.read_persistent_volume(name).spec.persistent_volume_reclaim_policy == "Retain"
        admin.patch_persistent_volume(name, forbidden["the reclaim policy"])
    finally:
        cluster.kubectl("delete", "pv", name, "--wait=false")


# -- pods: the active label on its own pod ----------------------------------------------------------------------------

def test_the_operator_may_only_label_its_own_pod_active(release):
    from mountwarden.adapters.webhookconfig import ActivePodLabel

    core = kubernetes.client.CoreV1Api(release.operator)
    admin = kubernetes.client.CoreV1Api(release.admin)
    # What the active replica does (ActivePodLabel), on the pod its token is bound to: allowed.
    label = ActivePodLabel(release.operator, namespace=release.namespace, pod=release.operator_pod, key=ACTIVE)
    assert label.set(True)
    assert admin.read_namespaced_pod(release.operator_pod, release.namespace).metadata.labels[ACTIVE] == "true"
    assert label.set(False)
    assert ACTIVE not in (admin.read_namespaced_pod(release.operator_pod, release.namespace).metadata.labels or {})

    policy = release.policy("operator-pods")
    own = "may only set its pod's mountwarden.io/active label"
    forbidden = {
        "the image of its own pod": (release.operator_pod, own, {"spec": {"containers": [
            {"name": "main", "image": "evil:1"}]}}),
        "another label of its own pod": (release.operator_pod, own, {"metadata": {"labels": {"app": "x"}}}),
        "an annotation of its own pod": (release.operator_pod, own, {"metadata": {"annotations": {"a": "b"}}}),
        "the active label to another value": (release.operator_pod, own, {"metadata": {"labels": {ACTIVE: "yes"}}}),
        "the active label on another pod": (release.other_pod, "may label only its own pod",
                                             {"metadata": {"labels": {ACTIVE: "true"}}}),
    }
    for what, (pod, message, body) in forbidden.items():
        assert_refused_by(lambda pod=pod, body=body: core.patch_namespaced_pod(pod, release.namespace, body),
                          policy, message, what)
    assert ACTIVE not in (admin.read_namespaced_pod(release.other_pod, release.namespace).metadata.labels or {})
    admin.patch_namespaced_pod(release.other_pod, release.namespace, {"metadata": {"labels": {ACTIVE: "true"}}})


def test_the_operator_still_evicts_a_replica_anywhere(cluster, release):
    """Evictions (a rollout's remount) are a subresource no policy narrows: PodDisruptionBudgets decide."""
    make_pod(cluster, release.workloads, "replica", "default", cluster.node_names[2])
    uid = kubernetes.client.CoreV1Api(release.admin).read_namespaced_pod("replica", release.workloads).metadata.uid
    eviction = kubernetes.client.V1Eviction(
        api_version="policy/v1", kind="Eviction",
        metadata=kubernetes.client.V1ObjectMeta(name="replica", namespace=release.workloads),
        delete_options=kubernetes.client.V1DeleteOptions(preconditions=kubernetes.client.V1Preconditions(uid=uid)))
    kubernetes.client.CoreV1Api(release.operator).create_namespaced_pod_eviction("replica", release.workloads, eviction)
    def going() -> bool:
        try:
            pod = kubernetes.client.CoreV1Api(release.admin).read_namespaced_pod("replica", release.workloads)
        except ApiException as error:
            return error.status == 404
        return pod.metadata.uid != uid or pod.metadata.deletion_timestamp is not None

    wait_for(going, what="the evicted replica going")


# -- the -enforce configuration: deny webhooks of mountwarden's shape only ----------------------------------------

def test_the_operator_may_only_write_deny_webhooks_calling_its_own_service(release):
    api = kubernetes.client.AdmissionregistrationV1Api(release.operator)
    service = {"service": {"namespace": release.namespace, "name": f"{release.fullname}-webhook", "port": 443}}
    excluded = excluded_namespaces(release.namespace, [exempt_namespace(release.name)])
    # Scoped to claims labelled for this test alone: no other test's PVC waits on a webhook nobody serves.
    guarded = ProfileEntry("rights", "nfs.csi.k8s.io", enforcement=Enforcement.DENY,
                           pvc_selector={"matchLabels": {"mountwarden.io/test": release.name}})

    def apply(body: dict) -> object:
        return api.patch_validating_webhook_configuration(
            release.enforce, body, field_manager="mountwarden", force=True,
            _content_type="application/apply-patch+yaml")

    # What the active replica writes (WebhookRegistrar, through the Service): allowed.
    registrar = WebhookRegistrar(release.operator, excluded, enforcement_configuration=release.enforce)
    registrar.serving(service)
    registrar.enforce([guarded])
    stored = kubernetes.client.AdmissionregistrationV1Api(release.admin).read_validating_webhook_configuration(
        release.enforce)
    try:
        assert [w.name for w in stored.webhooks or []] == ["rights.enforce.mountwarden.io"]

        policy = release.policy("operator-enforce")
        message = f"may write only deny profiles' webhooks: each calling its own webhook Service {release.namespace}/"

        def rendered(client_config: dict, excluded: list[str] = excluded, **changes) -> dict:
            body = render_enforcement(client_config, name=release.enforce, excluded=excluded, enforcing=[guarded])
            body["webhooks"][0].update(changes)
            return body

        forbidden = {
            "another Service": rendered({"service": {**service["service"], "name": "collector"}}),
            "a Service of another namespace": rendered({"service": {**service["service"], "namespace": "elsewhere"}}),
            "a URL": rendered({"url": "https://collector.example.com"}),
            "Secrets in its rules": rendered(service, rules=[{
                "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"], "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced"}]),
            "kube-system not left out": rendered(service, excluded=[release.namespace, exempt_namespace(release.name)]),
            "the chart's exempt namespace not left out": rendered(service, excluded=excluded_namespaces(
                release.namespace)),
            "namespaces labelled exempt not left out": without_exempt_label(rendered(service)),
            "failurePolicy Ignore": rendered(service, failurePolicy="Ignore"),
        }
        for what, body in forbidden.items():
            assert_refused_by(lambda body=body: apply(body), policy, message, what)
        assert_refused_by(lambda: apply({**rendered(service), "metadata": {
            "name": release.enforce, "labels": {"example.com/owner": "x"}}}), policy,
            "may change only the webhooks of its enforce configuration")
    finally:
        registrar.enforce([])
    assert not kubernetes.client.AdmissionregistrationV1Api(release.admin).read_validating_webhook_configuration(
        release.enforce).webhooks


def without_exempt_label(body: dict) -> dict:
    for hook in body["webhooks"]:
        expressions = hook["namespaceSelector"]["matchExpressions"]
        hook["namespaceSelector"]["matchExpressions"] = [e for e in expressions if e["key"] != EXEMPT_LABEL]
        assert len(hook["namespaceSelector"]["matchExpressions"]) == len(expressions) - 1
    return body


# -- NodeMountReports: its own node's, only its spec --------------------------------------------------------------

def test_the_agent_writes_only_its_own_nodes_report_and_only_its_spec(cluster, release):
    node, other = release.agent_node, cluster.node_names[1]
    cluster.kubectl("delete", f"{REPORTS}.{GROUP}", node, other, "--ignore-not-found")
    custom = kubernetes.client.CustomObjectsApi(release.agent)
    policy = release.policy("agent-reports")
    try:
        # What the agent does (ReportWriter, owner reference to its Node included): allowed.
        writer = ReportWriter(release.agent, node)
        assert writer.sync(spec_for(node)) is WriteOutcome.CREATED
        stored = custom.get_cluster_custom_object(GROUP, VERSION, REPORTS, node)
        assert [ref["kind"] for ref in stored["metadata"]["ownerReferences"]] == ["Node"]
        assert writer.sync(spec_for(node).model_copy(update={"network_fstypes": ["nfs"]})) is WriteOutcome.UPDATED

        foreign = f"runs on node {node} and may write only NodeMountReport {node} describing that node"
        assert_refused_by(lambda: custom.create_cluster_custom_object(GROUP, VERSION, REPORTS, report(other)),
                          policy, f"{foreign} (spec.nodeName), not {other}")
        assert_refused_by(lambda: ReportWriter(release.agent, other).sync(spec_for(other)), policy, foreign)
        # Another node's name on a report that describes this one: refused too (each report's name is its node's).
        misnamed = {**report(node), "metadata": {"name": other}}
        assert_refused_by(lambda: custom.create_cluster_custom_object(GROUP, VERSION, REPORTS, misnamed),
                          policy, f"{foreign} (spec.nodeName), not {other}")
        stored = custom.get_cluster_custom_object(GROUP, VERSION, REPORTS, node)
        lying = {**stored, "spec": {**stored["spec"], "nodeName": other}}
        assert_refused_by(lambda: custom.replace_cluster_custom_object(GROUP, VERSION, REPORTS, node, lying),
                          policy, foreign)

        only_spec = "may change only its NodeMountReport's spec"
        for what, metadata in {
            "a label": {"labels": {"example.com/team": "x"}},
            "an annotation": {"annotations": {"example.com/team": "x"}},
            "a finalizer": {"finalizers": ["example.com/block"]},
            "another owner": {"ownerReferences": [*stored["metadata"]["ownerReferences"], {
                "apiVersion": "v1", "kind": "Node", "name": other, "uid": str(uuid.uuid4())}]},
        }.items():
            changed = {**stored, "metadata": {**stored["metadata"], **metadata}}
            assert_refused_by(lambda changed=changed: custom.replace_cluster_custom_object(
                GROUP, VERSION, REPORTS, node, changed), policy, only_spec, what)

        # A token bound to no pod names no node: refused whatever it writes.
        assert_refused_by(lambda: kubernetes.client.CustomObjectsApi(release.unbound_agent).create_cluster_custom_object(
            GROUP, VERSION, REPORTS, report(other)), policy, "its token names no node")
        assert refusal(lambda: custom.get_cluster_custom_object(GROUP, VERSION, REPORTS, other)).status == 404
        # An administrator writes any report.
        kubernetes.client.CustomObjectsApi(release.admin).create_cluster_custom_object(
            GROUP, VERSION, REPORTS, report(other), dry_run="All")
    finally:
        cluster.kubectl("delete", f"{REPORTS}.{GROUP}", node, other, "--ignore-not-found")


def test_the_api_server_type_checks_every_policy_without_a_warning(release):
    api = kubernetes.client.AdmissionregistrationV1Api(release.admin)
    names = [release.policy(s) for s in ("operator-workloads", "operator-volumes", "operator-pods",
                                         "operator-enforce", "agent-reports")]
    checked = wait_for(lambda: all(
        (p := api.read_validating_admission_policy(name)).status and p.status.observed_generation == p.metadata.generation
        for name in names) and [api.read_validating_admission_policy(name) for name in names], what="type checking")
    for policy in checked:
        assert not (policy.status.type_checking and policy.status.type_checking.expression_warnings), (
            policy.metadata.name, policy.status.type_checking)
