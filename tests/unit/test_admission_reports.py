"""The NodeMountReport check (the agent writes only its own node's report), the cluster-mode deny webhooks,
and which replica answers admission (kopf peering, the active pod label)."""

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import kopf
import pytest
from kubernetes.client import ApiException
from tests.support import operator_context

from mountwarden.adapters import peering
from mountwarden.adapters.peering import ActiveReplica, replica_active
from mountwarden.adapters.rest import APPLY
from mountwarden.adapters.webhookconfig import (
    ActivePodLabel,
    WebhookRegistrar,
    parse_service,
    render_configuration,
    render_enforcement,
    report_webhook,
)
from mountwarden.api.nodemountreport import report_write
from mountwarden.core.admission import (
    NODE_NAME_EXTRA,
    ProfileEntry,
    ReportWrite,
    review_report_write,
    service_account_username,
)
from mountwarden.handlers import admission
from mountwarden.handlers.admission import AdmissionState, keep_active_label
from mountwarden.handlers.config import OperatorConfig

AGENT = "system:serviceaccount:mountwarden:mountwarden-agent"


def write(name: str, *, username: str = AGENT, nodes=("node-a",), node_name: str | None = "same") -> ReportWrite:
    return ReportWrite(name=name, node_name=name if node_name == "same" else node_name, username=username,
                       extra={NODE_NAME_EXTRA: list(nodes)} if nodes is not None else {})


# -- the decision ---------------------------------------------------------------------------------------


def test_the_agent_writes_its_own_nodes_report():
    assert review_report_write(write("node-a"), AGENT).denial is None


def test_the_agent_may_not_write_another_nodes_report():
    assert review_report_write(write("node-b"), AGENT).denial == (
        f"the node agent ({AGENT}) runs on node node-a and may write only NodeMountReport node-a, not node-b")


def test_the_report_must_describe_the_agents_node():
    assert review_report_write(write("node-a", node_name="node-b"), AGENT).denial == (
        f"the node agent ({AGENT}) runs on node node-a: NodeMountReport node-a must describe it, but its "
        "spec.nodeName is node-b")


@pytest.mark.parametrize("nodes", [None, (), ("",), ("node-a", "node-b")])
def test_a_token_bound_to_no_single_node_writes_nothing(nodes):
    denial = review_report_write(write("node-a", nodes=nodes), AGENT).denial
    assert denial is not None and "may write only the NodeMountReport of its own node" in denial
    assert NODE_NAME_EXTRA in denial and "Kubernetes 1.30" in denial


@pytest.mark.parametrize("username", ["kubernetes-admin", "system:serviceaccount:mountwarden:mountwarden-operator",
                                      "system:serviceaccount:other:mountwarden-agent"])
def test_everyone_else_is_left_to_rbac(username):
    assert review_report_write(write("node-b", username=username), AGENT).findings == ()


def test_without_an_agent_account_nothing_is_checked():
    assert review_report_write(write("node-b"), None).findings == ()


def test_a_report_write_is_read_from_the_admission_request():
    body = {"metadata": {"name": "node-a"}, "spec": {"nodeName": "node-a"}}
    userinfo = {"username": AGENT, "uid": "u", "groups": ["system:serviceaccounts"],
                "extra": {NODE_NAME_EXTRA: ["node-a"], "authentication.kubernetes.io/pod-name": ["agent-x"]}}
    assert report_write(body, userinfo) == ReportWrite("node-a", "node-a", AGENT, userinfo["extra"])
    assert report_write({"metadata": {"name": "n"}}, {"username": "u"}) == ReportWrite("n", None, "u", {})


@pytest.mark.parametrize(("reference", "username"), [
    ("mountwarden:mountwarden-agent", AGENT),
    ("kube-system:agent", "system:serviceaccount:kube-system:agent"),
])
def test_service_account_usernames(reference, username):
    assert service_account_username(reference) == username


@pytest.mark.parametrize("reference", ["agent", ":agent", "ns:", "ns:a:b", ""])
def test_malformed_service_accounts_are_refused(reference):
    with pytest.raises(ValueError, match="NAMESPACE:NAME"):
        service_account_username(reference)


# -- the handler --------------------------------------------------------------------------------------


def validate_report(body: dict, userinfo: dict, agent: str | None = AGENT) -> list[str]:
    warnings: list[str] = []
    memo = operator_context(config=OperatorConfig(agent_service_account=agent.removeprefix(
        "system:serviceaccount:") if agent else None))
    asyncio.run(admission.validate_report(body=kopf.Body(body), userinfo=userinfo, warnings=warnings, memo=memo))
    return warnings


def test_the_handler_denies_another_nodes_report_with_403():
    body = {"metadata": {"name": "node-b"}, "spec": {"nodeName": "node-b"}}
    with pytest.raises(kopf.AdmissionError) as raised:
        validate_report(body, {"username": AGENT, "extra": {NODE_NAME_EXTRA: ["node-a"]}})
    assert raised.value.code == 403 and "may write only NodeMountReport node-a, not node-b" in str(raised.value)


def test_the_handler_admits_the_own_report_and_anyone_else():
    body = {"metadata": {"name": "node-a"}, "spec": {"nodeName": "node-a"}}
    assert validate_report(body, {"username": AGENT, "extra": {NODE_NAME_EXTRA: ["node-a"]}}) == []
    assert validate_report({**body, "metadata": {"name": "node-b"}}, {"username": "admin"}) == []


def test_settings_come_from_the_operator_config():
    config = OperatorConfig(
        agent_service_account="mountwarden:mountwarden-agent", webhook_service="mountwarden/mountwarden-webhook",
        enforce_configuration="mountwarden-enforce", active_label="mountwarden.io/active",
    )
    assert (config.agent_username, config.webhook_service_ref) == (
        AGENT, {"namespace": "mountwarden", "name": "mountwarden-webhook", "port": 443})
    assert (config.enforce_configuration, config.active_label) == ("mountwarden-enforce", "mountwarden.io/active")
    assert (OperatorConfig().agent_username, OperatorConfig().webhook_service_ref) == (None, None)


def test_a_malformed_setting_is_refused_naming_its_flag():
    with pytest.raises(ValueError, match="--webhook-service: expected the webhook Service as NAMESPACE/NAME"):
        OperatorConfig(webhook_service="no-namespace")
    with pytest.raises(ValueError, match="--agent-service-account: expected a service account as NAMESPACE:NAME"):
        OperatorConfig(agent_service_account="agent")


# -- the webhook configurations -------------------------------------------------------------------------


SERVICE = {"service": {"namespace": "mw", "name": "mw-webhook", "port": 443}, "caBundle": "Q0E="}


@pytest.mark.parametrize(("reference", "parsed"), [
    ("mw/mw-webhook", {"namespace": "mw", "name": "mw-webhook", "port": 443}),
    ("mw/mw-webhook:8443", {"namespace": "mw", "name": "mw-webhook", "port": 8443}),
])
def test_service_references(reference, parsed):
    assert parse_service(reference) == parsed


@pytest.mark.parametrize("reference", ["mw-webhook", "/x", "mw/", "mw/x:http"])
def test_malformed_service_references_are_refused(reference):
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        parse_service(reference)


def test_the_report_webhook_fails_closed_and_concerns_only_the_agent():
    hook = report_webhook({"url": "https://127.0.0.1:4443", "caBundle": "Q0E="}, AGENT)
    assert hook == {
        "name": "nodemountreport.mountwarden.io",
        "clientConfig": {"url": "https://127.0.0.1:4443/nodemountreport", "caBundle": "Q0E="},
        "rules": [{"apiGroups": ["mountwarden.io"], "apiVersions": ["v1alpha1"], "resources": ["nodemountreports"],
                   "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}],
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "None", "timeoutSeconds": 3,
        "admissionReviewVersions": ["v1"],
        "matchConditions": [{"name": "node-agent", "expression": f'request.userInfo.username == "{AGENT}"'}],
    }


def test_locally_the_report_webhook_joins_the_configuration_only_with_an_agent_account():
    server = {"url": "https://127.0.0.1:4443"}
    rendered = render_configuration(server, excluded=["kube-system"], agent_username=AGENT, fail_closed=False)
    names = [h["name"] for h in rendered["webhooks"]]
    assert names == ["pvc.mountwarden.io", "storageprofile.mountwarden.io", "nodemountreport.mountwarden.io"]
    assert len(render_configuration(server, excluded=["kube-system"], fail_closed=False)["webhooks"]) == 2


def test_in_a_cluster_the_webhooks_go_through_the_service():
    body = render_configuration(SERVICE, excluded=["kube-system", "mw"], agent_username=AGENT, fail_closed=True)
    assert [h["clientConfig"] for h in body["webhooks"]] == [
        {"service": {"namespace": "mw", "name": "mw-webhook", "port": 443, "path": f"/{path}"}, "caBundle": "Q0E="}
        for path in ("pvc", "storageprofile", "nodemountreport")]


DENY = ProfileEntry("guarded", "efs.csi.aws.com", enforcement="deny", pvc_selector={"matchLabels": {"app": "db"}})


def test_the_enforcement_configuration_holds_only_the_deny_webhooks_and_no_labels():
    body = render_enforcement(SERVICE, name="mw-enforce", excluded=["kube-system", "mw"], enforcing=[DENY])
    assert body["metadata"] == {"name": "mw-enforce"}  # the chart's labels stay Helm's
    (hook,) = body["webhooks"]
    assert hook["name"] == "guarded.enforce.mountwarden.io" and hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["service"]["path"] == "/pvc" and hook["objectSelector"] == {"matchLabels": {"app": "db"}}
    assert render_enforcement(SERVICE, name="mw-enforce", excluded=["kube-system"], enforcing=[])["webhooks"] == []


class FakeAdmissionApi:
    """Stands in for the registrar's Rest: records each server-side apply by the configuration's name."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, dict]] = []

    def patch(self, resource_path, body, *, content_type, **_):
        prefix = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
        assert resource_path.startswith(prefix) and content_type == APPLY
        self.applied.append((resource_path.removeprefix(prefix), body))


def registrar(active: list[bool]) -> tuple[WebhookRegistrar, FakeAdmissionApi]:
    registrar = WebhookRegistrar.__new__(WebhookRegistrar)
    WebhookRegistrar.__init__(registrar, client=None, excluded=["kube-system", "mw"],
                              enforcement_configuration="mw-enforce", is_active=lambda: active[0])
    api = FakeAdmissionApi()
    registrar.rest = api
    return registrar, api


def test_a_replica_writes_the_deny_webhooks_only_once_it_knows_the_profiles_and_is_active():
    active = [False]
    reg, api = registrar(active)
    reg.serving(SERVICE)
    assert api.applied == []  # a standby knows no profiles: it must not empty the active one's webhooks
    reg.enforce([DENY])
    assert api.applied == []  # knows them, but is not the active replica
    active[0] = True
    reg.refresh()
    ((name, body),) = api.applied
    assert name == "mw-enforce" and [h["name"] for h in body["webhooks"]] == ["guarded.enforce.mountwarden.io"]
    reg.enforce([DENY])
    assert len(api.applied) == 1  # unchanged: not written again
    reg.enforce([])
    assert api.applied[-1][1]["webhooks"] == []  # a profile that stops denying loses its webhook


def test_locally_the_registrar_still_writes_at_once():
    reg = WebhookRegistrar.__new__(WebhookRegistrar)
    WebhookRegistrar.__init__(reg, client=None, excluded=["kube-system"], agent_username=AGENT)
    reg.rest = api = FakeAdmissionApi()
    reg.serving({"url": "https://127.0.0.1:4443", "caBundle": "Q0E="})
    ((name, body),) = api.applied
    assert name == "mountwarden.io" and len(body["webhooks"]) == 3


# -- which replica answers --------------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def peer(priority: int, *, seen_ago: float = 10, lifetime: int = 60) -> dict:
    return {"priority": priority, "lifetime": lifetime, "lastseen": (NOW - timedelta(seconds=seen_ago)).isoformat()}


def test_the_highest_live_priority_is_active():
    peers = {"pod-a": peer(500), "pod-b": peer(900)}
    assert replica_active(peers, priority=900, identity="pod-b", now=NOW)
    assert not replica_active(peers, priority=500, identity="pod-a", now=NOW)


def test_a_dead_peer_does_not_count():
    peers = {"pod-a": peer(500), "pod-b": peer(900, seen_ago=61)}
    assert replica_active(peers, priority=500, identity="pod-a", now=NOW)


def test_equal_priorities_freeze_everyone_as_kopf_does():
    peers = {"pod-a": peer(500), "pod-b": peer(500)}
    assert not replica_active(peers, priority=500, identity="pod-a", now=NOW)
    assert not replica_active(peers, priority=500, identity=None, now=NOW)


def test_without_an_identity_one_peer_of_the_same_priority_is_this_one():
    assert replica_active({"x": peer(500), "y": peer(100)}, priority=500, identity=None, now=NOW)


def test_removed_peers_and_missing_lastseen_are_read_as_kopf_reads_them():
    assert replica_active({"pod-a": peer(500), "gone": None}, priority=500, identity="pod-a", now=NOW)
    assert not replica_active({"pod-b": {"priority": 900}}, priority=500, identity="pod-a", now=NOW)
    assert replica_active({"pod-b": {"priority": 900, "lastseen": "2026-01-01T11:00:00Z"}}, priority=500,
                          identity="pod-a", now=NOW)


class FakeCustomApi:
    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.calls = 0

    def get_cluster_custom_object(self, group, version, plural, name, **_):
        assert (group, version, plural) == peering.PEERING
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def active_replica(answers: list, clock: list[float]) -> tuple[ActiveReplica, FakeCustomApi]:
    replica = ActiveReplica.__new__(ActiveReplica)
    ActiveReplica.__init__(replica, client=None, peering_name="mw", priority=900, identity="pod-b",
                           clock=lambda: clock[0])
    replica.api = api = FakeCustomApi(answers)
    return replica, api


def live_status(priority_of_other: int) -> dict:
    now = datetime.now(UTC).isoformat()
    return {"status": {"pod-a": {"priority": priority_of_other, "lifetime": 60, "lastseen": now},
                       "pod-b": {"priority": 900, "lifetime": 60, "lastseen": now}}}


def test_the_peering_object_is_read_at_most_every_max_age_and_errors_keep_the_last_answer():
    clock = [0.0]
    replica, api = active_replica([live_status(500), ApiException(status=503), ApiException(status=404)], clock)
    assert replica() and replica() and api.calls == 1
    clock[0] = 2.0
    assert replica() and api.calls == 2  # 503: the last answer stands
    clock[0] = 4.0
    assert not replica()  # no peering object: kopf stays paused


class FakeCoreApi:
    def __init__(self) -> None:
        self.patches: list[dict] = []

    def patch(self, resource_path, body, **_):
        assert resource_path == "/api/v1/namespaces/mw/pods/mw-operator-abc"
        self.patches.append(body)


def pod_label() -> tuple[ActivePodLabel, FakeCoreApi]:
    label = ActivePodLabel.__new__(ActivePodLabel)
    ActivePodLabel.__init__(label, client=None, namespace="mw", pod="mw-operator-abc", key="mountwarden.io/active")
    label.rest = api = FakeCoreApi()
    return label, api


def test_the_label_is_written_first_and_on_changes_only():
    label, api = pod_label()
    assert label.set(False)  # a restarted process clears a label its predecessor left
    assert not label.set(False)
    assert label.set(True) and not label.set(True)
    assert api.patches == [{"metadata": {"labels": {"mountwarden.io/active": None}}},
                           {"metadata": {"labels": {"mountwarden.io/active": "true"}}}]


def test_only_the_active_replica_with_filled_indexes_may_answer():
    admission = AdmissionState(replica_active=lambda: True)
    assert not admission.can_answer()
    admission.ready.set()
    assert admission.can_answer()
    admission.replica_active = lambda: False
    assert not admission.can_answer()


def test_the_label_loop_follows_the_replica_and_unlabels_on_the_way_out():
    label, api = pod_label()
    stop = threading.Event()
    states = iter([False, True, True])
    refreshed: list[bool] = []

    class Registrar:
        def refresh(self) -> None:
            refreshed.append(True)

    def active() -> bool:
        value = next(states, None)
        if value is None:
            stop.set()
            return True
        return value

    admission = AdmissionState(replica_active=active, registrar=Registrar())
    admission.ready.set()
    keep_active_label(admission, label, stop, logger=None, interval=0)
    assert [p["metadata"]["labels"]["mountwarden.io/active"] for p in api.patches] == [None, "true", None]
    assert refreshed == [True]  # becoming active rewrites the deny webhooks once
