"""The ValidatingWebhookConfiguration the operator registers when it runs outside a cluster."""

from mountwarden.adapters.webhookconfig import excluded_namespaces, render_configuration
from mountwarden.core.admission import ProfileEntry

SERVER = {"url": "https://127.0.0.1:40123", "caBundle": "Q0E="}
NOT_SYSTEM = {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "mountwarden"]},
]}


def common(name: str, path: str, failure_policy: str) -> dict:
    return {
        "name": name,
        "clientConfig": {"url": f"https://127.0.0.1:40123/{path}", "caBundle": "Q0E="},
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": 3,
        "admissionReviewVersions": ["v1"],
    }


PVC_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumeclaims"],
            "operations": ["CREATE"], "scope": "Namespaced"}


def test_every_pvc_and_profile_goes_through_webhooks_that_never_block():
    body = render_configuration(SERVER, excluded=excluded_namespaces("mountwarden"))
    assert body["metadata"]["name"] == "mountwarden.io"
    assert body["webhooks"] == [
        {**common("pvc.mountwarden.io", "pvc", "Ignore"), "rules": [PVC_RULE], "namespaceSelector": NOT_SYSTEM},
        {**common("storageprofile.mountwarden.io", "storageprofile", "Ignore"),
         "rules": [{"apiGroups": ["mountwarden.io"], "apiVersions": ["v1alpha1"], "resources": ["storageprofiles"],
                    "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}]},
    ]


def test_each_deny_profile_gets_a_failing_webhook_scoped_by_its_own_selectors():
    importer = ProfileEntry("importer-scratch", "efs.csi.aws.com", enforcement="deny",
                            namespace_selector={"matchLabels": {"team": "importer"},
                                                "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                            pvc_selector={"matchLabels": {"app": "db"}})
    uploads = ProfileEntry("uploads", "efs.csi.aws.com", enforcement="deny", pvc_selector={"matchLabels": {"a": "b"}})
    body = render_configuration(SERVER, excluded=excluded_namespaces("mountwarden"), enforcing=[importer, uploads])
    assert body["webhooks"][2:] == [
        {**common("importer-scratch.enforce.mountwarden.io", "pvc", "Fail"), "rules": [PVC_RULE],
         "namespaceSelector": {"matchLabels": {"team": "importer"}, "matchExpressions": [
             {"key": "tier", "operator": "Exists"}, *NOT_SYSTEM["matchExpressions"]]},
         "objectSelector": {"matchLabels": {"app": "db"}}},
        {**common("uploads.enforce.mountwarden.io", "pvc", "Fail"), "rules": [PVC_RULE],
         "namespaceSelector": NOT_SYSTEM, "objectSelector": {"matchLabels": {"a": "b"}}},
    ]


def test_without_an_own_namespace_only_kube_system_is_left_out():
    assert excluded_namespaces(None) == ["kube-system"]
    body = render_configuration(SERVER, excluded=excluded_namespaces(None))
    assert body["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]
