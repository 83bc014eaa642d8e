"""The ValidatingWebhookConfiguration the operator registers when it runs outside a cluster, and how a failed
review reaches the API server."""

import asyncio

import aiohttp.web
import pytest

from mountwarden.adapters.webhookconfig import (
    excluded_namespaces,
    failures_as_http_errors,
    render_configuration,
    stale_webhooks,
)

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
    body = render_configuration(SERVER, excluded=excluded_namespaces("mountwarden"), fail_closed=False)
    assert body["metadata"]["name"] == "mountwarden.io"
    assert body["webhooks"] == [
        {**common("pvc.mountwarden.io", "pvc", "Ignore"), "rules": [PVC_RULE], "namespaceSelector": NOT_SYSTEM},
        {**common("storageprofile.mountwarden.io", "storageprofile", "Ignore"),
         "rules": [{"apiGroups": ["mountwarden.io"], "apiVersions": ["v1alpha1"], "resources": ["storageprofiles"],
                    "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}]},
    ]


def test_locally_nothing_fails_closed_not_even_the_report_check():
    """A process outside the cluster can die without withdrawing anything: nothing it leaves may block."""
    body = render_configuration(SERVER, excluded=excluded_namespaces("mountwarden"),
                                agent_username="system:serviceaccount:mw:agent", fail_closed=False)
    assert [(hook["name"], hook["failurePolicy"]) for hook in body["webhooks"]] == [
        ("pvc.mountwarden.io", "Ignore"), ("storageprofile.mountwarden.io", "Ignore"),
        ("nodemountreport.mountwarden.io", "Ignore")]


def test_without_an_own_namespace_only_kube_system_is_left_out():
    assert excluded_namespaces(None) == ["kube-system"]
    body = render_configuration(SERVER, excluded=excluded_namespaces(None), fail_closed=False)
    assert body["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


def answered(response: dict):
    async def review(request, **_):
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    return asyncio.run(failures_as_http_errors(review)({"request": {}}, webhook="pvc"))


def test_a_failed_review_is_an_http_error_so_that_the_failure_policy_applies():
    with pytest.raises(aiohttp.web.HTTPInternalServerError) as raised:
        answered({"uid": "1", "allowed": False, "status": {"code": 500, "message": "RuntimeError('bug')"}})
    assert raised.value.text == "RuntimeError('bug')"


@pytest.mark.parametrize("response", [
    {"uid": "1", "allowed": True, "warnings": ["a warning"]},
    {"uid": "1", "allowed": False, "status": {"code": 403, "message": "a deny profile refuses"}},
])
def test_verdicts_pass_unchanged(response):
    assert answered(response)["response"] == response


# -- what the repair loop removes ---------------------------------------------------------------------------

def test_stale_webhooks_are_mountwardens_that_it_did_not_write_last_first():
    written = {"webhooks": [{"name": "a.enforce.mountwarden.io"}]}
    live = {"webhooks": [{"name": "gone.enforce.mountwarden.io"}, {"name": "a.enforce.mountwarden.io"},
                         {"name": "someone.else.example.com"}, {"name": "old.enforce.mountwarden.io"}]}
    assert stale_webhooks(written, live) == [(3, "old.enforce.mountwarden.io"), (0, "gone.enforce.mountwarden.io")]
    assert stale_webhooks(written, None) == []
    assert stale_webhooks({"webhooks": []}, {"webhooks": [{"name": "someone.else.example.com"}]}) == []
