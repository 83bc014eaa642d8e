"""Namespaces no mountwarden webhook calls, besides kube-system and the operator's own: those named by
``--exempt-namespace`` (the chart's webhook.exemptNamespaces) and those labelled ``mountwarden.io/exempt: "true"``.

The real kube-apiserver decides from each webhook's namespaceSelector: the operator's own PVC webhook (registered
by the operator, started with MOUNTWARDEN_EXEMPT_NAMESPACES as the chart passes --exempt-namespace) and a deny
profile's failurePolicy Fail webhook, written by mountwarden's registrar with the same namespaces left out, as the
active replica writes it into the chart's enforce configuration (here pointed at the local operator's server, which
the API server can reach; a Service it cannot).
"""

import json
import subprocess
import uuid
from collections.abc import Iterator

import kubernetes
import pytest
from tests.integration.moto_server import MotoServer, dummy_aws_environment
from tests.integration.test_enforce_isolation import enforce_configuration  # noqa: F401 (its fixture)
from tests.support import OperatorProcess, profile_body, wait_for

from mountwarden.adapters.webhookconfig import (
    EXEMPT_LABEL,
    PVC_WEBHOOK,
    WebhookRegistrar,
    enforce_webhook_name,
    excluded_namespaces,
)
from mountwarden.core.admission import ProfileEntry

pytestmark = pytest.mark.cluster

#: Named at the operator's start, as a value of the chart; created by the test.
EXEMPT_BY_NAME = f"mw-exempt-named-{uuid.uuid4().hex[:6]}"
PROBE_CLASS = "mw-exempt-probe-nfs"
CONFIGURATION = "mountwarden.io"


@pytest.fixture(scope="module")
def operator(cluster, crds_installed, _moto_server_process: MotoServer, tmp_path_factory) -> Iterator[OperatorProcess]:
    """This module's operator, told one exempt namespace by name (MOUNTWARDEN_EXEMPT_NAMESPACES)."""
    log_dir = tmp_path_factory.mktemp("operator")
    env = {**dummy_aws_environment(log_dir), "AWS_ENDPOINT_URL": _moto_server_process.endpoint_url,
           "MOUNTWARDEN_EXEMPT_NAMESPACES": EXEMPT_BY_NAME}
    process = OperatorProcess(str(cluster.kubeconfig), log_dir, extra_env=env)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def exempt_namespaces(kube, unique) -> Iterator[tuple[str, str]]:
    """(the namespace the operator was told by name, one labelled exempt), each otherwise ordinary."""
    labelled = f"mw-exempt-labelled-{unique}"
    kube.core.create_namespace({"metadata": {"name": EXEMPT_BY_NAME}})
    kube.core.create_namespace({"metadata": {"name": labelled, "labels": {EXEMPT_LABEL: "true"}}})
    yield EXEMPT_BY_NAME, labelled
    for name in (EXEMPT_BY_NAME, labelled):
        kube.core.delete_namespace(name)


def create(cluster, obj: dict, *, dry_run: bool = False) -> subprocess.CompletedProcess:
    return cluster.kubectl("create", "-f", "-", *(["--dry-run=server"] if dry_run else []),
                           input=json.dumps(obj), check=False)


def claim(namespace: str, name: str, app: str) -> dict:
    """A claim on a network class no profile governs, labelled as a deny profile's consumer: refused."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": PROBE_CLASS}}


def test_a_claim_a_deny_profile_refuses_goes_through_in_exempt_namespaces_and_is_refused_elsewhere(
        cluster, kube, operator, namespace, unique, exempt_namespaces, enforce_configuration):  # noqa: F811
    named, labelled = exempt_namespaces
    guarded = f"guarded-{unique}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": PROBE_CLASS},
        "provisioner": "nfs.csi.k8s.io"}))
    kube.apply_profile(profile_body(guarded, "cached", enforcement="deny",
                                    consumers={"pvcSelector": {"matchLabels": {"app": guarded}}}))
    refusal = (f"PVC {namespace}/wrong-class is a consumer of StorageProfile {guarded} but asks for StorageClass "
               f"{PROBE_CLASS}")
    registrar = WebhookRegistrar(kube.client, excluded_namespaces(None, [named]),
                                 enforcement_configuration=enforce_configuration)
    try:
        # The operator answering: refused where its webhook is called, once its indexes hold the profile.
        wait_for(lambda: refusal in create(cluster, claim(namespace, "wrong-class", guarded), dry_run=True).stderr,
                 timeout=120, what="the operator refusing the deny profile's claim")
        refused = create(cluster, claim(namespace, "wrong-class", guarded))
        assert refused.returncode != 0 and refusal in refused.stderr, refused.stderr
        for exempt in (named, labelled):
            admitted = create(cluster, claim(exempt, "wrong-class", guarded))
            # Not even a warning: no mountwarden webhook was called.
            assert admitted.returncode == 0 and "Warning" not in admitted.stderr, (exempt, admitted.stderr)
        registered = kube_configuration(kube, CONFIGURATION)
        (pvc_hook,) = [hook for hook in registered["webhooks"] if hook["name"] == f"{PVC_WEBHOOK}.{CONFIGURATION}"]
        assert pvc_hook["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", named]},
            {"key": EXEMPT_LABEL, "operator": "NotIn", "values": ["true"]}]

        # The deny profile's failurePolicy Fail webhook, with the operator frozen: refused in an ordinary
        # namespace, admitted in the two exempt ones.
        client = pvc_hook["clientConfig"]
        server = {"url": client["url"].removesuffix(f"/{PVC_WEBHOOK}"), "caBundle": client["caBundle"]}
        registrar.serving(server)
        registrar.enforce([ProfileEntry(guarded, "efs.csi.aws.com", pvc_selector={"matchLabels": {"app": guarded}},
                                        enforcement="deny")])
        hooks = kube_configuration(kube, enforce_configuration)["webhooks"]
        assert [(hook["name"], hook["failurePolicy"]) for hook in hooks] == [(enforce_webhook_name(guarded), "Fail")]
        with operator.paused():
            # The API server reads webhook configurations through its own informer: called once it has caught up.
            wait_for(lambda: f'failed calling webhook "{enforce_webhook_name(guarded)}"'
                     in create(cluster, claim(namespace, "while-down", guarded), dry_run=True).stderr,
                     timeout=120, what="the API server calling the new Fail webhook")
            denied = create(cluster, claim(namespace, "while-down", guarded))
            admitted = {exempt: create(cluster, claim(exempt, "while-down", guarded)) for exempt in (named, labelled)}
        assert denied.returncode != 0, "a deny profile's claim was admitted with nobody answering"
        assert f'failed calling webhook "{enforce_webhook_name(guarded)}"' in denied.stderr, denied.stderr
        for exempt, result in admitted.items():
            assert result.returncode == 0, (exempt, result.stderr)
    finally:
        registrar.enforce([])  # nothing is written before it serves: then this writes nothing either
        kube.delete_profile(guarded)
        cluster.kubectl("delete", "storageclass", PROBE_CLASS, "--ignore-not-found")


def kube_configuration(kube, name: str) -> dict:
    api = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    return json.loads(api.read_validating_webhook_configuration(name, _preload_content=False).data)
