"""The deny profiles' failurePolicy Fail webhooks, written by mountwarden's registrar into the real API server.

In a cluster the active replica writes them into the chart's enforce configuration, through the webhook
Service. Here the same registrar writes them for the local operator's server (the API server cannot reach a
Service here), and the operator answers the reviews.
"""

import json
import subprocess
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import kubernetes
import pytest
import yaml
from tests.support import GROUP, ROOT, VERSION, profile_body, wait_for

from mountwarden.adapters.kube import ProfileConditions
from mountwarden.adapters.webhookconfig import PVC_WEBHOOK, WebhookRegistrar, keep_webhooks
from mountwarden.core.admission import ProfileEntry
from mountwarden.handlers.admission import ENFORCED, report_enforcement

pytestmark = pytest.mark.cluster


def configuration(kube, name: str) -> dict | None:
    api = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    try:
        return json.loads(api.read_validating_webhook_configuration(name, _preload_content=False).data)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def hooks(kube, name: str) -> dict[str, dict]:
    return {hook["name"]: hook for hook in (configuration(kube, name) or {}).get("webhooks") or []}


def create(cluster, obj: dict, *, dry_run: bool = False) -> subprocess.CompletedProcess:
    return cluster.kubectl("create", "-f", "-", *(["--dry-run=server"] if dry_run else []),
                           input=json.dumps(obj), check=False)


def claim(namespace: str, name: str, app: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "mw-isolation-nfs"}}


@pytest.fixture
def enforce_configuration(kube, unique) -> Iterator[str]:
    """An empty configuration, as the chart creates it for the operator to fill."""
    name = f"mw-test-enforce-{unique}"
    api = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    api.create_validating_webhook_configuration({"metadata": {"name": name}, "webhooks": []})
    yield name
    api.delete_validating_webhook_configuration(name)


def test_a_deny_profile_the_api_server_refuses_costs_only_itself(cluster, kube, operator, namespace, unique,
                                                                 enforce_configuration):
    good, bad = f"guarded-{unique}", f"broken-{unique}"
    registered = wait_for(lambda: configuration(kube, "mountwarden.io"), timeout=120,
                          what="the operator's own configuration")
    client = registered["webhooks"][0]["clientConfig"]
    server = {"url": client["url"].removesuffix(f"/{PVC_WEBHOOK}"), "caBundle": client["caBundle"]}
    for name in (good, bad):
        kube.apply_profile(profile_body(name, "cached", enforcement="deny",
                                        consumers={"pvcSelector": {"matchLabels": {"app": name}}}))
    wait_for(lambda: kube.condition(good, "Ready"), what=f"{good} reconciled")
    # The bad profile as the operator's index held it when its CRD did not check selectors yet: In, no values.
    entries = [ProfileEntry(good, "efs.csi.aws.com", pvc_selector={"matchLabels": {"app": good}}, enforcement="deny"),
               ProfileEntry(bad, "efs.csi.aws.com", enforcement="deny",
                            pvc_selector={"matchExpressions": [{"key": "app", "operator": "In", "values": []}]})]
    conditions = ProfileConditions(kube.client, GROUP, VERSION, "storageprofiles", "StorageProfile")
    registrar = WebhookRegistrar(kube.client, ["kube-system"], enforcement_configuration=enforce_configuration,
                                 report=lambda changed: report_enforcement(SimpleNamespace(conditions=conditions),
                                                                           changed))
    stop = threading.Event()
    repairing = threading.Thread(target=keep_webhooks, args=(registrar, stop, 0.5), daemon=True)
    try:
        registrar.serving(server)
        registrar.enforce(entries)

        assert list(hooks(kube, enforce_configuration)) == [f"{good}.enforce.mountwarden.io"]
        assert hooks(kube, enforce_configuration)[f"{good}.enforce.mountwarden.io"]["failurePolicy"] == "Fail"
        refused = kube.condition(bad, ENFORCED)
        assert (refused["status"], refused["reason"]) == ("False", "WebhookRefused")
        assert "objectSelector.matchExpressions[0].values: Required value" in refused["message"], refused["message"]
        assert "fix spec.consumers' selectors" in refused["message"]
        assert kube.condition(good, ENFORCED)["status"] == "True"

        # The good profile is enforced fail-closed: with the operator frozen, its claim is refused, the bad one's
        # (no webhook of its own) goes through.
        with operator.paused():
            # The API server reads webhook configurations through its own informer: called once it has caught up.
            wait_for(lambda: f'failed calling webhook "{good}.enforce.mountwarden.io"'
                     in create(cluster, claim(namespace, "guarded", good), dry_run=True).stderr,
                     timeout=120, what="the API server calling the new Fail webhook")
            denied = create(cluster, claim(namespace, "guarded", good))
            admitted = create(cluster, claim(namespace, "unguarded", bad))
        assert denied.returncode != 0 and f'failed calling webhook "{good}.enforce.mountwarden.io"' in denied.stderr
        assert admitted.returncode == 0, admitted.stderr

        # Outside edits are undone: a webhook turned fail-open, and a stale Fail webhook someone left.
        assert registrar.repair() is False  # nothing changed: nothing to undo (and the check itself writes nothing)
        repairing.start()
        cluster.kubectl("patch", "validatingwebhookconfiguration", enforce_configuration, "--type=json", "-p",
                        json.dumps([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]))
        wait_for(lambda: hooks(kube, enforce_configuration)[f"{good}.enforce.mountwarden.io"]["failurePolicy"]
                 == "Fail", what="the fail-open edit undone")
        stale = {**hooks(kube, enforce_configuration)[f"{good}.enforce.mountwarden.io"],
                 "name": f"gone-{unique}.enforce.mountwarden.io"}
        cluster.kubectl("patch", "validatingwebhookconfiguration", enforce_configuration, "--type=json", "-p",
                        json.dumps([{"op": "add", "path": "/webhooks/-", "value": stale}]))
        wait_for(lambda: list(hooks(kube, enforce_configuration)) == [f"{good}.enforce.mountwarden.io"],
                 what="the stale webhook removed")

        # A deny profile gone (deleted) loses its Fail webhook.
        registrar.enforce(entries[1:])
        assert hooks(kube, enforce_configuration) == {}
    finally:
        stop.set()
        if repairing.is_alive():
            repairing.join(timeout=10)
        for name in (good, bad):
            kube.delete_profile(name)


def test_a_write_the_api_server_refused_is_retried_until_it_lands(cluster, kube, unique, enforce_configuration):
    """The operator's identity may not patch the configuration yet (403): the repair loop writes once it may."""
    user = f"mw-test-registrar-{unique}"
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube.client)
    rule = {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
            "resourceNames": [enforce_configuration], "verbs": ["get"]}
    rbac.create_cluster_role({"metadata": {"name": user}, "rules": [rule]})
    rbac.create_cluster_role_binding({"metadata": {"name": user},
                                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                  "name": user},
                                      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                                    "name": user}]})
    as_user = cluster.api_client()
    as_user.set_default_header("Impersonate-User", user)
    entry = ProfileEntry(f"guarded-{unique}", "efs.csi.aws.com", pvc_selector={"matchLabels": {"app": "x"}},
                         enforcement="deny")
    registrar = WebhookRegistrar(as_user, ["kube-system"], enforcement_configuration=enforce_configuration)
    stop = threading.Event()
    repairing = threading.Thread(target=keep_webhooks, args=(registrar, stop, 0.5), daemon=True)
    try:
        with pytest.raises(kubernetes.client.ApiException) as refused:
            registrar.serving({"service": {"namespace": "mountwarden", "name": "mountwarden-webhook",
                                           "path": "/pvc", "port": 443}})
            registrar.enforce([entry])
        assert refused.value.status == 403
        assert hooks(kube, enforce_configuration) == {}
        repairing.start()
        rbac.patch_cluster_role(user, {"rules": [{**rule, "verbs": ["get", "patch"]}]})
        wait_for(lambda: list(hooks(kube, enforce_configuration)) == [f"guarded-{unique}.enforce.mountwarden.io"],
                 what="the refused write retried once allowed")
    finally:
        stop.set()
        if repairing.is_alive():
            repairing.join(timeout=10)
        rbac.delete_cluster_role_binding(user)
        rbac.delete_cluster_role(user)


def test_a_selector_only_mountwarden_can_judge_is_refused_at_admission_and_reported_if_it_got_in(
        cluster, kube, operator, unique):
    """A label key whose prefix is longer than a DNS subdomain passes the CRD's pattern (a regular expression
    cannot count the prefix apart), not mountwarden's check, which is the API server's own."""
    name = f"prefixed-{unique}"
    key = "a" * 254 + "/app"
    body = profile_body(name, "cached", enforcement="deny", consumers={"pvcSelector": {"matchLabels": {key: "db"}}})
    expected = ("spec.consumers.pvcSelector.matchLabels: Value error, " + key + ": label key " + repr(key)
                + ": the prefix " + repr("a" * 254) + " is not a DNS subdomain")
    try:
        wait_for(lambda: "denied the request" in create(cluster, {**body, "metadata": {"name": f"{name}-probe"}}
                                                        ).stderr, timeout=120, what="the operator's webhook answering")
        refused = create(cluster, body)
        assert refused.returncode != 0 and expected in refused.stderr, refused.stderr
        with operator.paused():  # the profile webhook is failurePolicy Ignore: stored while nobody answers
            stored = create(cluster, body)
        assert stored.returncode == 0, stored.stderr
        ready = wait_for(lambda: kube.condition(name, "Ready"), what=f"{name}'s Ready condition")
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
        assert expected in ready["message"], ready["message"]
        assert kube.classes_of(name) == {}
    finally:
        kube.delete_profile(name)
        kube.delete_profile(f"{name}-probe")


def test_a_name_too_long_for_a_label_admitted_before_the_crd_refused_it_is_reported_and_deletes(
        cluster, kube, operator, unique, tmp_path):
    """The profile got in under a CRD without the name rule (as on an older release): the operator writes no class,
    says why, and its deletion finishes (nothing is listed by a label value that cannot exist)."""
    original = ROOT / "crds" / "mountwarden.io_storageprofiles.yaml"
    crd = yaml.safe_load(original.read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].pop("x-kubernetes-validations")
    relaxed = tmp_path / "relaxed.yaml"
    relaxed.write_text(yaml.safe_dump(crd))
    name = f"long-{unique}-" + "x" * (64 - len(f"long-{unique}-"))
    body = profile_body(name, "cached", provisioner="nfs.csi.k8s.io", parameters={"server": "nfs.example"})
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(relaxed))
        wait_for(lambda: create(cluster, body).returncode == 0 or kube.profile(name) is not None,
                 what="the relaxed CRD serving")
        ready = wait_for(lambda: kube.condition(name, "Ready"), what=f"{name}'s Ready condition")
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
        assert "metadata.name: a StorageProfile's name is the value of the label mountwarden.io/profile" in ready[
            "message"]
        assert "mountwarden.io/finalizer" in kube.profile(name)["metadata"]["finalizers"]
        kube.delete_profile(name)
        wait_for(lambda: kube.profile(name) is None, what=f"{name} deleted, its finalizer removed by the operator")
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(original))
        kube.delete_profile(name)


def test_an_enforce_configuration_with_no_deny_profile_is_left_alone_by_the_repair_loop(kube, enforce_configuration):
    """No deny profile (the chart's default): nothing to write, and nothing said to have drifted, round after round."""
    registrar = WebhookRegistrar(kube.client, ["kube-system"], enforcement_configuration=enforce_configuration)
    registrar.serving({"url": "https://127.0.0.1:1/", "caBundle": ""})
    registrar.enforce([])
    version = configuration(kube, enforce_configuration)["metadata"]["resourceVersion"]
    assert [registrar.repair() for _ in range(3)] == [False, False, False]
    assert configuration(kube, enforce_configuration)["metadata"]["resourceVersion"] == version
    # ...and a webhook of mountwarden's that someone left there is still removed.
    api = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    stale = {"name": "gone.enforce.mountwarden.io", "clientConfig": {"url": "https://127.0.0.1:1/pvc"},
             "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumeclaims"],
                        "operations": ["CREATE"]}], "sideEffects": "None", "admissionReviewVersions": ["v1"]}
    api.patch_validating_webhook_configuration(enforce_configuration, [{"op": "add", "path": "/webhooks",
                                                                        "value": [stale]}])
    assert registrar.repair() is True
    assert hooks(kube, enforce_configuration) == {}
