"""The ValidatingWebhookConfiguration the operator registers when it runs outside a cluster, and how a failed
review reaches the API server."""

import asyncio

import aiohttp.web
import pytest

from mountwarden.adapters.webhookconfig import (
    EXEMPT_LABEL,
    excluded_namespaces,
    failures_as_http_errors,
    render_configuration,
    render_enforcement,
    stale_webhooks,
)
from mountwarden.core.admission import ProfileEntry
from mountwarden.handlers.config import OperatorConfig

SERVER = {"url": "https://127.0.0.1:40123", "caBundle": "Q0E="}
NOT_SYSTEM = {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "mountwarden"]},
    {"key": "mountwarden.io/exempt", "operator": "NotIn", "values": ["true"]},
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


# -- namespaces left out: kube-system, the operator's own, the exempt ones, and those labelled exempt ---------------

SERVICE = {"service": {"namespace": "mw", "name": "mw-webhook", "port": 443}, "caBundle": "Q0E="}


def test_exempt_namespaces_follow_kube_system_and_the_operators_own_each_once():
    assert excluded_namespaces("mw", ["batch", "mw", "kube-system", "batch", "ops"]) == [
        "kube-system", "mw", "batch", "ops"]


def test_every_deny_webhook_leaves_out_the_exempt_namespaces_and_those_labelled_exempt():
    """The profile's own namespace selector, narrowed: ANDed expressions, so an exempt namespace never matches."""
    scoped = ProfileEntry("guarded", "efs.csi.aws.com", enforcement="deny",
                          namespace_selector={"matchLabels": {"team": "data"},
                                              "matchExpressions": [{"key": "tier", "operator": "Exists"}]})
    unscoped = ProfileEntry("everywhere", "efs.csi.aws.com", enforcement="deny")
    body = render_enforcement(SERVICE, name="mw-enforce", excluded=excluded_namespaces("mw", ["batch"]),
                              enforcing=[scoped, unscoped])
    left_out = [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "mw", "batch"]},
                {"key": EXEMPT_LABEL, "operator": "NotIn", "values": ["true"]}]
    assert EXEMPT_LABEL == "mountwarden.io/exempt"
    assert [hook["namespaceSelector"] for hook in body["webhooks"]] == [
        {"matchLabels": {"team": "data"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}, *left_out]},
        {"matchExpressions": left_out},
    ]
    assert scoped.namespace_selector["matchExpressions"] == [{"key": "tier", "operator": "Exists"}]  # not changed


def test_the_pvc_webhook_leaves_out_the_same_namespaces():
    body = render_configuration(SERVICE, excluded=excluded_namespaces("mw", ["batch"]), fail_closed=True)
    pvc, profiles = body["webhooks"]
    assert pvc["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "mw", "batch"]},
        {"key": EXEMPT_LABEL, "operator": "NotIn", "values": ["true"]}]
    assert "namespaceSelector" not in profiles  # cluster-scoped: a namespaceSelector never skips them


def test_exempt_namespaces_come_from_the_command_line_or_the_environment(monkeypatch):
    import typer

    from mountwarden.cli import app

    command = typer.main.get_command(app).commands["operator"]
    given = command.make_context("operator", ["--exempt-namespace=batch", "--exempt-namespace", "ops"])
    assert given.params["exempt_namespaces"] == ["batch", "ops"]
    monkeypatch.setenv("MOUNTWARDEN_EXEMPT_NAMESPACES", "batch ops")
    assert command.make_context("operator", []).params["exempt_namespaces"] == ["batch", "ops"]


@pytest.mark.parametrize("name", ["Batch", "batch_jobs", "-batch", "b" * 64, ""])
def test_an_exempt_namespace_that_cannot_be_a_namespace_is_refused_at_start(name):
    with pytest.raises(ValueError, match=r"--exempt-namespace: not a namespace name"):
        OperatorConfig(exempt_namespaces=("batch", name))
    assert OperatorConfig(exempt_namespaces=("batch", "b" * 63)).exempt_namespaces == ("batch", "b" * 63)


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


@pytest.mark.parametrize("mode", ["local", "cluster"])
def test_the_operator_hands_its_exempt_namespaces_to_the_registrar_of_either_mode(tmp_path, mode):
    """Locally the registrar writes the PVC webhook; in a cluster, the deny profiles' Fail webhooks."""
    import logging
    from types import SimpleNamespace

    import kopf
    from kubernetes.client import ApiClient

    from mountwarden.adapters import certs
    from mountwarden.handlers.admission import serve_admission
    from mountwarden.handlers.config import WebhookMode

    certs.issue(tmp_path, ["127.0.0.1"])
    cluster = {"webhook_service": "mw/mw-webhook", "enforce_configuration": "mw-enforce"} if mode == "cluster" else {}
    config = OperatorConfig(webhook_mode=WebhookMode(mode), namespace="mw", exempt_namespaces=("batch",),
                            webhook_cert_dir=str(tmp_path), **cluster)
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    memo = SimpleNamespace(config=config, kube_client=ApiClient(), replica_active=lambda: True)
    serve_admission(settings, memo, logging.getLogger(__name__))
    try:
        registrar = memo.admission.registrar
        assert registrar.enforcement_configuration == cluster.get("enforce_configuration")
        assert registrar.excluded == ["kube-system", "mw", "batch"]
    finally:
        memo.admission.repair_stop.set()
        memo.admission.repair_thread.join(timeout=10)
