"""The admission handlers and their indexes, driven the way kopf drives them, without a cluster.

The indexes live in kopf's own index store (OperatorIndexers), fed by the handler
module's index functions: kopf keeps an object's previous entries when its index
function returns None, and these tests hold the functions to that rule.
"""

import asyncio
import logging

import kopf
import pytest
from kopf._cogs.structs.references import Insights, Resource
from kopf._core.actions.execution import Outcome
from kopf._core.engines.admission import serve_admission_request
from kopf._core.engines.indexing import OperatorIndexer, OperatorIndexers
from kopf._core.intents.causes import WebhookType
from kopf._core.reactor.inventory import ResourceMemories
from tests.support import operator_context

from mountwarden.adapters.webhookconfig import PROFILE_WEBHOOK, PVC_WEBHOOK
from mountwarden.core.admission import ClassEntry, ProfileEntry
from mountwarden.core.policy import resolve_policy
from mountwarden.handlers import admission, indexes
from mountwarden.handlers.admission import resolve_mode
from mountwarden.handlers.config import WebhookMode
from mountwarden.handlers.context import OperatorContext

EFS = "efs.csi.aws.com"
INDEXES = {
    "profiles_by_name": indexes.profiles_by_name,
    "profiles_by_consumer": indexes.profiles_by_consumer,
    "classes_by_name": indexes.classes_by_name,
    "classes_by_profile": indexes.classes_by_profile,
    "default_classes": indexes.default_classes,
    "namespace_labels": indexes.namespace_labels,
}


class Indexes:
    """kopf's index store, fed by the index functions for one resource kind at a time."""

    def __init__(self) -> None:
        self.indexers = OperatorIndexers()
        for name in [*INDEXES, "volumes_by_class"]:
            self.indexers[name] = OperatorIndexer()

    def apply(self, obj: dict, *names: str) -> None:
        body = kopf.Body(obj)
        kwargs = dict(body=body, name=body.metadata.name, spec=body.spec, status=body.status,
                      labels=body.metadata.labels, annotations=body.metadata.annotations)
        self.indexers.replace(body, {name: Outcome(final=True, result=INDEXES[name](**kwargs)) for name in names})

    def delete(self, obj: dict) -> None:
        self.indexers.discard(kopf.Body(obj))

    def kwargs(self) -> dict:
        return {name: indexer.index for name, indexer in self.indexers.items()}

    def entries(self, index: str) -> dict:
        return {key: list(store) for key, store in self.indexers[index].index.items()}


CLASS_INDEXES = ("classes_by_name", "classes_by_profile", "default_classes")


def storage_class(name, *, profile=None, version=None, default=False, superseded_by=None, uid=None) -> dict:
    labels = {"mountwarden.io/profile": profile, "mountwarden.io/version": str(version)} if profile else {}
    annotations = {}
    if default:
        annotations["storageclass.kubernetes.io/is-default-class"] = "true"
    if superseded_by:
        annotations["mountwarden.io/superseded-by"] = superseded_by
    return {"metadata": {"name": name, "uid": uid or name, "labels": labels, "annotations": annotations},
            "provisioner": EFS}


def profile(name="importer-scratch", *, status=None, **spec) -> dict:
    return {
        "metadata": {"name": name, "uid": name},
        "spec": {"backend": {"provisioner": EFS, "parameters": {"fileSystemId": "fs-0123456789abcdef0"}},
                 "cachePolicy": "cached", "consumers": {"namespaceSelector": {"matchLabels": {"team": "importer"}}},
                 **spec},
        "status": status or {"storageClassName": f"{name}-v1", "version": 1},
    }


# -- indexes --------------------------------------------------------------------------------------------


def test_storage_class_indexes_follow_add_update_and_delete():
    indexes = Indexes()
    v1 = storage_class("importer-scratch-v1", profile="importer-scratch", version=1, default=True)
    indexes.apply(v1, *CLASS_INDEXES)
    assert [c.name for c in indexes.entries("default_classes")["default"]] == ["importer-scratch-v1"]
    assert [c.name for c in indexes.entries("classes_by_profile")["importer-scratch"]] == ["importer-scratch-v1"]

    # v2 takes over: v1 loses the default annotation and is marked superseded.
    indexes.apply(storage_class("importer-scratch-v2", profile="importer-scratch", version=2, default=True),
                  *CLASS_INDEXES)
    indexes.apply(storage_class("importer-scratch-v1", profile="importer-scratch", version=1,
                                superseded_by="importer-scratch-v2"), *CLASS_INDEXES)
    assert [c.name for c in indexes.entries("default_classes")["default"]] == ["importer-scratch-v2"]
    assert indexes.entries("classes_by_name")["importer-scratch-v1"][0].superseded_by == "importer-scratch-v2"
    assert sorted(c.name for c in indexes.entries("classes_by_profile")["importer-scratch"]) == [
        "importer-scratch-v1", "importer-scratch-v2"]

    indexes.delete(v1)
    assert "importer-scratch-v1" not in indexes.entries("classes_by_name")
    assert [c.name for c in indexes.entries("classes_by_profile")["importer-scratch"]] == ["importer-scratch-v2"]


def test_a_class_that_loses_its_profile_label_leaves_the_lineage():
    indexes = Indexes()
    indexes.apply(storage_class("x-v1", profile="x", version=1), *CLASS_INDEXES)
    indexes.apply(storage_class("x-v1"), *CLASS_INDEXES)
    assert indexes.entries("classes_by_profile") == {}
    assert indexes.entries("classes_by_name")["x-v1"] == [ClassEntry("x-v1", EFS)]


def test_profile_index_follows_add_update_and_delete():
    indexes = Indexes()
    indexes.apply(profile(), "profiles_by_name")
    (entry,) = indexes.entries("profiles_by_name")["importer-scratch"]
    assert entry == ProfileEntry(
        "importer-scratch", EFS, namespace_selector={"matchLabels": {"team": "importer"}, "matchExpressions": []},
        cache_policy="cached", file_system_id="fs-0123456789abcdef0", storage_class_name="importer-scratch-v1",
        effective_options=resolve_policy(provisioner=EFS, cache_policy="cached").options,
    )

    indexes.apply(profile(enforcement="deny", status={"storageClassName": "importer-scratch-v2",
                                                      "credits": {"throughputMode": "bursting"}}), "profiles_by_name")
    (entry,) = indexes.entries("profiles_by_name")["importer-scratch"]
    assert (entry.enforcement, entry.storage_class_name, entry.throughput_mode) == (
        "deny", "importer-scratch-v2", "bursting")

    # An update that makes the spec invalid takes the profile out: it governs nothing until fixed.
    indexes.apply(profile(mountOptions=["nconect=4"]), "profiles_by_name")
    assert indexes.entries("profiles_by_name") == {}
    indexes.apply(profile(), "profiles_by_name")
    indexes.delete(profile())
    assert indexes.entries("profiles_by_name") == {}


def test_namespace_labels_follow_updates():
    indexes = Indexes()
    namespace = {"metadata": {"name": "importer", "uid": "ns", "labels": {"team": "importer"}}}
    indexes.apply(namespace, "namespace_labels")
    indexes.apply({"metadata": {"name": "importer", "uid": "ns", "labels": {"team": "web"}}}, "namespace_labels")
    assert indexes.entries("namespace_labels") == {"importer": [{"team": "web"}]}
    indexes.delete(namespace)
    assert indexes.entries("namespace_labels") == {}


def test_credit_watch_file_system_wins_over_the_backend_parameter():
    indexes = Indexes()
    indexes.apply(profile(creditWatch={"fileSystemId": "fs-00000000000000001"}), "profiles_by_name")
    assert indexes.entries("profiles_by_name")["importer-scratch"][0].file_system_id == "fs-00000000000000001"


# -- handlers -------------------------------------------------------------------------------------------


def memo(ready: bool = True) -> OperatorContext:
    return operator_context(ready=ready)


@pytest.fixture
def cluster() -> Indexes:
    indexes = Indexes()
    indexes.apply(profile(enforcement="deny"), "profiles_by_name", "profiles_by_consumer")
    indexes.apply(storage_class("importer-scratch-v1", profile="importer-scratch", version=1), *CLASS_INDEXES)
    indexes.apply(storage_class("efs-sc"), *CLASS_INDEXES)
    indexes.apply({"metadata": {"name": "importer", "uid": "ns1", "labels": {"team": "importer"}}},
                  "namespace_labels")
    indexes.apply({"metadata": {"name": "web", "uid": "ns2", "labels": {}}}, "namespace_labels")
    return indexes


def pvc(namespace: str, storage_class: str) -> kopf.Body:
    return kopf.Body({"metadata": {"name": "data", "namespace": namespace},
                      "spec": {"storageClassName": storage_class}})


def validate_pvc(body: kopf.Body, indexes: Indexes, memo_: OperatorContext) -> list[str]:
    warnings: list[str] = []
    asyncio.run(admission.validate_pvc(body=body, warnings=warnings, memo=memo_, logger=logging.getLogger("test"),
                                       **indexes.kwargs()))
    return warnings


UNGOVERNED = ("StorageClass efs-sc is NFS (efs.csi.aws.com) but no StorageProfile governs it: "
              "use a StorageProfile's class, or create a profile for it")


def test_pvc_warnings_go_into_kopfs_warnings_list(cluster):
    assert validate_pvc(pvc("web", "efs-sc"), cluster, memo()) == [UNGOVERNED]


def test_pvc_denial_is_a_403_admission_error(cluster):
    with pytest.raises(kopf.AdmissionError) as raised:
        validate_pvc(pvc("importer", "efs-sc"), cluster, memo())
    assert raised.value.code == 403
    assert str(raised.value) == ("PVC importer/data is a consumer of StorageProfile importer-scratch but asks for "
                                 "StorageClass efs-sc: use storageClassName importer-scratch-v1")


def test_until_the_indexes_are_filled_the_review_fails_for_the_failure_policy_to_decide(cluster):
    with pytest.raises(admission.ReviewUnavailable, match="still filling"):
        validate_pvc(pvc("importer", "efs-sc"), cluster, memo(ready=False))


def test_a_failing_review_fails_and_logs_why(cluster, caplog):
    cluster.indexers["profiles_by_consumer"].replace(("", "broken", "uid"), {("any",): "not a profile entry"})
    with caplog.at_level(logging.ERROR), pytest.raises(admission.ReviewUnavailable, match="could not review"):
        validate_pvc(pvc("web", "efs-sc"), cluster, memo())
    assert "the review failed (this is mountwarden's bug)" in caplog.text


def validate_profile(body: dict, indexes: Indexes, *, operation="CREATE", old: dict | None = None) -> list[str]:
    warnings: list[str] = []
    asyncio.run(admission.validate_profile(
        name=body["metadata"]["name"], body=kopf.Body(body), old=kopf.Body(old) if old else None, operation=operation,
        warnings=warnings, memo=memo(), logger=logging.getLogger("test"), **indexes.kwargs()))
    return warnings


def test_an_invalid_profile_is_denied_naming_the_field(cluster):
    with pytest.raises(kopf.AdmissionError) as raised:
        validate_profile(profile("bad", mountOptions=["hard", "nconect=4"]), cluster)
    assert raised.value.code == 403
    assert str(raised.value).startswith("StorageProfile bad is invalid: spec.mountOptions[1]: unknown option 'nconect'")


def test_a_schema_error_is_denied_naming_the_field(cluster):
    body = profile("bad")
    del body["spec"]["backend"]["provisioner"]
    with pytest.raises(kopf.AdmissionError) as raised:
        validate_profile(body, cluster)
    assert str(raised.value) == "StorageProfile bad is invalid: spec.backend.provisioner: Field required"


def test_metadata_changes_of_an_invalid_profile_pass(cluster):
    """kopf adds its finalizer and annotations to profiles admitted while the webhook was down."""
    bad = profile("bad", mountOptions=["nconect=4"])
    with_finalizer = {**bad, "metadata": {**bad["metadata"], "finalizers": ["mountwarden.io/finalizer"]}}
    assert validate_profile(with_finalizer, cluster, operation="UPDATE", old=bad) == []
    deleting = {**bad, "spec": {**bad["spec"], "mountOptions": ["nconect=5"]},
                "metadata": {**bad["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert validate_profile(deleting, cluster, operation="UPDATE", old=bad) == []
    with pytest.raises(kopf.AdmissionError):
        validate_profile({**bad, "spec": {**bad["spec"], "cachePolicy": "coherent"}}, cluster, operation="UPDATE",
                         old=bad)


def test_an_overlapping_profile_is_admitted_with_a_warning(cluster):
    assert validate_profile(profile("importer-fast"), cluster) == [
        "StorageProfile importer-fast: spec.consumers overlaps those of StorageProfile importer-scratch: a PVC "
        "matching both gets two contracts; narrow one of the selectors"
    ]


def test_profile_change_reads_the_highest_version_from_status():
    change = admission.profile_change("p", profile("p", status={"version": 2, "history": [{"version": 5}]}),
                                      updating=True)
    assert change.last_version == 5 and change.updating and change.desired is not None


@pytest.mark.parametrize(("mode", "kubeconfig", "environ", "resolved"), [
    (WebhookMode.AUTO, None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, WebhookMode.CLUSTER),
    (WebhookMode.AUTO, "/k", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, WebhookMode.LOCAL),
    (WebhookMode.AUTO, None, {}, WebhookMode.LOCAL),
    (WebhookMode.CLUSTER, "/k", {}, WebhookMode.CLUSTER),
    (WebhookMode.LOCAL, None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, WebhookMode.LOCAL),
])
def test_webhook_mode(mode, kubeconfig, environ, resolved):
    assert resolve_mode(mode, kubeconfig=kubeconfig, environ=environ) == resolved


# -- the PVC fast path against kopf's own admission path ------------------------------------------------


def admission_request(namespace: str = "web", storage_class: str = "efs-sc", *, operation: str = "CREATE",
                      plural: str = "persistentvolumeclaims", **extra) -> dict:
    claim = {"metadata": {"name": "data", "namespace": namespace}, "spec": {"storageClassName": storage_class}}
    payload = {"uid": "u-1", "operation": operation, "userInfo": {"username": "alice"}, "object": claim,
               "resource": {"group": "", "version": "v1", "resource": plural}, **extra}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": payload}


def kopfs_answer(request: dict, indices: dict, memo_: OperatorContext) -> dict:
    """What kopf's own path (serve_admission_request, validate_pvc registered as in production) answers."""
    registry = kopf.OperatorRegistry()
    kopf.on.validate("v1", "persistentvolumeclaims", operations=["CREATE"], id=PVC_WEBHOOK,
                     registry=registry)(admission.validate_pvc)
    insights = Insights()
    insights.webhook_resources.add(Resource(group="", version="v1", plural="persistentvolumeclaims",
                                            kind="PersistentVolumeClaim", namespaced=True))
    return asyncio.run(serve_admission_request(
        request, webhook=PVC_WEBHOOK, reason=WebhookType.VALIDATING, settings=kopf.OperatorSettings(),
        memories=ResourceMemories(), memobase=memo_, registry=registry, insights=insights, indices=indices))


class FailingIndex(dict):
    """An index whose every read fails: a review that raises (mountwarden's bug) answers with an error."""

    def get(self, *_):
        raise RuntimeError("broken index")

    __getitem__ = get


@pytest.mark.parametrize("request_, case", [
    (admission_request("web", "efs-sc"), "warned"),
    (admission_request("importer", "efs-sc"), "denied"),
    (admission_request("importer", "importer-scratch-v1"), "allowed"),
    (admission_request("importer", "efs-sc"), "review fails"),
    (admission_request("importer", "efs-sc"), "indexes still filling"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_the_pvc_fast_path_answers_what_kopfs_path_answers(cluster, request_, case):
    indices = cluster.kwargs()
    if case == "review fails":
        indices["namespace_labels"] = FailingIndex()
    memo_ = memo(ready=case != "indexes still filling")
    reviews = admission.PvcReviews(memo_)
    reviews.indexes = indices
    fast = reviews.answer(request_)
    kopfs = kopfs_answer(request_, indices, memo_)
    if case in ("review fails", "indexes still filling"):
        # Left to kopf's path, whose error the server turns into an HTTP 500: the failurePolicy decides.
        assert fast is None
        assert kopfs["response"]["allowed"] is False and kopfs["response"]["status"]["code"] == 500
        return
    assert fast == kopfs
    response = fast["response"]
    expected = {"warned": (True, [UNGOVERNED]), "denied": (False, [UNGOVERNED]), "allowed": (True, None)}[case]
    assert (response["allowed"], response.get("warnings")) == expected
    if case == "denied":
        assert response["status"]["code"] == 403
        assert response["status"]["message"].startswith("PVC importer/data is a consumer of StorageProfile")


@pytest.mark.parametrize("request_", [
    admission_request(operation="UPDATE"),
    admission_request(plural="storageprofiles"),
    admission_request(subResource="status"),
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-1"}},
    "not a review",
], ids=["update", "other resource", "subresource", "no object", "not a mapping"])
def test_the_pvc_fast_path_leaves_kopf_what_is_not_a_plain_pvc_create(cluster, request_):
    reviews = admission.PvcReviews(memo())
    reviews.indexes = cluster.kwargs()
    assert reviews.answer(request_) is None


def test_the_pvc_fast_path_waits_for_the_indexes(cluster):
    """Until indexes_filled hands it kopf's indexes, kopf's path answers (and allows, the indexes being half full)."""
    assert admission.PvcReviews(memo()).answer(admission_request()) is None


def test_the_wrapped_server_answers_pvcs_and_hands_kopf_the_rest(cluster):
    """The PVC webhook's requests are answered without kopf's function; every other one reaches it."""
    reviews = admission.PvcReviews(memo())
    reviews.indexes = cluster.kwargs()
    handed: list = []
    exits: list = []

    class Server:
        async def __aenter__(self):
            return self

        async def __aexit__(self, *_):
            exits.append(True)

        async def __call__(self, fn):
            for webhook, request in ((PVC_WEBHOOK, admission_request()), (PROFILE_WEBHOOK, admission_request()),
                                     (PVC_WEBHOOK, admission_request(operation="UPDATE"))):
                yield await fn(request, webhook=webhook, headers={})

    async def kopfs_path(request, *, webhook=None, **_):
        handed.append((webhook, request["request"]["operation"]))
        return {"from": "kopf"}

    async def serve() -> list:
        async with admission.AnsweringPvcsFirst(Server(), reviews) as server:
            return [answer async for answer in server(kopfs_path)]

    answers = asyncio.run(serve())
    assert answers[0]["response"]["warnings"] == [UNGOVERNED]
    assert answers[1:] == [{"from": "kopf"}, {"from": "kopf"}]
    assert handed == [(PROFILE_WEBHOOK, "CREATE"), (PVC_WEBHOOK, "UPDATE")]
    assert exits == [True]  # kopf's exit from the wrapper closes the server it wraps
