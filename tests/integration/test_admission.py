"""The admission webhook, called by the real kube-apiserver over TLS; the answers read from kubectl's stderr.

The kubernetes Python client does not surface admission warnings, so every
request goes through kubectl. The operator's indexes follow the cluster a moment
behind it: each check first repeats a server-side dry run until the answer
settles, then sends the real request and asserts its exact answer.
"""

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator

import kubernetes
import pytest
from tests.support import OperatorProcess, profile_body, wait_for

from mountwarden.adapters.webhookconfig import PVC_WEBHOOK, render_enforcement
from mountwarden.core.admission import ProfileEntry

pytestmark = pytest.mark.cluster

CONFIGURATION = "mountwarden.io"
#: A network class no profile governs: every PVC on it outside kube-system gets a warning.
PROBE_CLASS = "mw-admission-probe-nfs"
UNGOVERNED_PROBE = (f"StorageClass {PROBE_CLASS} is NFS (nfs.csi.k8s.io) but no StorageProfile governs it: "
                    "use a StorageProfile's class, or create a profile for it")
NOTHING = ([], None)


def pvc(namespace: str, name: str, storage_class: str | None = PROBE_CLASS, *, labels=None, annotations=None) -> dict:
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": spec}


def profile(name: str, cache_policy: str = "cached", **spec) -> dict:
    return profile_body(name, cache_policy, **spec)


def create(cluster, obj: dict, *, dry_run: bool = False) -> subprocess.CompletedProcess:
    return cluster.kubectl("create", "-f", "-", *(["--dry-run=server"] if dry_run else []),
                           input=json.dumps(obj), check=False)


def apply(cluster, obj: dict, *, dry_run: bool = False) -> subprocess.CompletedProcess:
    # Server-side: kubectl's client-side apply adds warnings of its own about its annotation.
    return cluster.kubectl("apply", "--server-side", "-f", "-", *(["--dry-run=server"] if dry_run else []),
                           input=json.dumps(obj), check=False)


def answer(result: subprocess.CompletedProcess) -> tuple[list[str], str | None]:
    """(the Warning: lines, the denial message or None) of one kubectl call."""
    warnings = [line.removeprefix("Warning: ") for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    if result.returncode == 0:
        return warnings, None
    assert "denied the request: " in result.stderr, result.stderr
    return warnings, result.stderr.split("denied the request: ", 1)[1].strip()


def settled(send: Callable[[bool], subprocess.CompletedProcess], expected: tuple) -> tuple[list[str], str | None]:
    """Wait until a dry run gets the expected answer, then send for real and return its answer."""
    wait_for(lambda: answer(send(True)) == expected, what=f"the webhook to answer {expected}")
    return answer(send(False))


def ready(kube, name: str, version: int = 1) -> None:
    wait_for(lambda: ((kube.profile(name) or {}).get("status") or {}).get("storageClassName") == f"{name}-v{version}",
             what=f"{name}-v{version} current")


def configuration(kube) -> dict | None:
    api = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    try:
        return api.read_validating_webhook_configuration(CONFIGURATION).to_dict()
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def wait_until_answering(cluster) -> None:
    probe = pvc("default", "admission-probe")
    wait_for(lambda: answer(create(cluster, probe, dry_run=True)) == ([UNGOVERNED_PROBE], None), timeout=120,
             what="the operator's webhook answering")


@pytest.fixture(scope="module")
def webhook(cluster, operator) -> None:
    """The operator's webhook is registered and answers from filled indexes."""
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": PROBE_CLASS},
        "provisioner": "nfs.csi.k8s.io",
    }))
    wait_until_answering(cluster)


@pytest.fixture
def profiles(kube) -> Iterator[list[str]]:
    """Names of profiles to delete after the test (a deny profile left behind keeps a Fail webhook)."""
    names: list[str] = []
    yield names
    for name in names:
        kube.delete_profile(name)


def bound_pv(kube, name: str, storage_class: str) -> None:
    kube.core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain",
                 "nfs": {"server": "fs-0123456789abcdef0.efs.us-east-1.amazonaws.com", "path": "/"}},
    })


def test_the_configuration_points_at_the_operator_and_never_blocks(kube, webhook):
    body = configuration(kube)
    hooks = {hook["name"]: hook for hook in body["webhooks"]}
    assert {"pvc.mountwarden.io", "storageprofile.mountwarden.io"} <= set(hooks)
    for name in ("pvc.mountwarden.io", "storageprofile.mountwarden.io"):
        hook = hooks[name]
        assert hook["failure_policy"] == "Ignore" and hook["timeout_seconds"] == 3
        assert hook["side_effects"] == "None" and hook["admission_review_versions"] == ["v1"]
        assert hook["client_config"]["url"].startswith("https://127.0.0.1:")
    assert hooks["pvc.mountwarden.io"]["namespace_selector"]["match_expressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
        {"key": "mountwarden.io/exempt", "operator": "NotIn", "values": ["true"]}]


def test_a_new_profile_with_the_deprecated_name_is_accepted_warned_and_gets_the_replacements_options(
        cluster, kube, webhook, unique, profiles):
    name = f"spool-{unique}"
    profiles.append(name)
    body = profile(name, "coherent")
    deprecated = (f"StorageProfile {name}: spec.cachePolicy: cachePolicy coherent is deprecated: its options "
                  "(cto,lookupcache=positive,acregmax=3, so acregmin=acregmax=3) left stat() by path up to 3 s stale")
    wait_for(lambda: answer(create(cluster, body, dry_run=True))[0], what="the deprecation warning")
    warnings, denial = answer(create(cluster, body))
    assert denial is None
    (warning,) = warnings  # a new profile: no version change to warn about
    assert warning.startswith(deprecated), warning
    assert "It now means staging (acregmin=0,acregmax=0,lookupcache=positive,cto): write cachePolicy: staging" in warning
    ready(kube, name)
    status = kube.profile(name)["status"]
    (in_status,) = status["warnings"]
    assert in_status.startswith("spec.cachePolicy: cachePolicy coherent is deprecated"), in_status
    assert {"acregmin=0", "acregmax=0", "lookupcache=positive", "cto"} <= set(status["effectiveMountOptions"])
    assert "acregmax=3" not in status["effectiveMountOptions"]
    assert "cachePolicy coherent is deprecated" in kube.condition(name, "Ready")["message"]


def test_a_deprecated_preset_keeps_working_and_changes_options_only_through_a_new_version(
        cluster, kube, webhook, unique, profiles):
    """A profile made when coherent meant acregmax=3 keeps working: warned about, moved by a new version."""
    name = f"uploads-{unique}"
    profiles.append(name)
    # What the operator used to make of cachePolicy coherent: the same StorageClass content.
    former = profile(name, None, mountOptions=["cto", "lookupcache=positive", "acregmax=3"])
    former["spec"].pop("cachePolicy")
    assert answer(apply(cluster, former)) == NOTHING
    ready(kube, name)
    bound_pv(kube, f"pv-{unique}", f"{name}-v1")
    try:
        renamed = profile(name, "coherent")
        # The webhook's indexes learn of v1 asynchronously: wait until a dry run sees the version change too.
        wait_for(lambda: len(answer(apply(cluster, renamed, dry_run=True))[0]) == 2, what="both warnings")
        warnings, denial = answer(apply(cluster, renamed))
        assert denial is None
        deprecated, version = warnings
        assert deprecated.startswith(f"StorageProfile {name}: spec.cachePolicy: cachePolicy coherent is deprecated")
        assert "It now means staging (acregmin=0,acregmax=0,lookupcache=positive,cto)" in deprecated
        assert version == (f"StorageProfile {name}: this change makes a new StorageClass {name}-v2; "
                           "1 bound PersistentVolume keeps its old mount options until remounted")
        ready(kube, name, version=2)
        status = kube.profile(name)["status"]
        assert status["warnings"] and "cachePolicy coherent is deprecated" in status["warnings"][0]
        assert "1 warning(s) in status.warnings" in kube.condition(name, "Ready")["message"]
        classes = kube.classes_of(name)
        assert "acregmin=0" in classes[f"{name}-v2"].mount_options
        # The bound volume keeps its class and options until the rollout (spec.rollout) moves it.
        assert "acregmax=3" in classes[f"{name}-v1"].mount_options
        assert classes[f"{name}-v1"].metadata.annotations["mountwarden.io/superseded-by"] == f"{name}-v2"
    finally:
        kube.core.delete_persistent_volume(f"pv-{unique}")


def test_superseded_class_and_a_consumer_on_the_wrong_class(cluster, kube, webhook, namespace, unique, profiles):
    name = f"importer-{unique}"
    consumer = {"app": name}
    profiles.append(name)
    assert answer(apply(cluster, profile(name, "cached", consumers={"pvcSelector": {"matchLabels": consumer}}))) \
        == NOTHING
    ready(kube, name)
    bound_pv(kube, f"pv-{unique}", f"{name}-v1")
    try:
        changed = profile(name, "staging", consumers={"pvcSelector": {"matchLabels": consumer}})
        expected = ([f"StorageProfile {name}: this change makes a new StorageClass {name}-v2; "
                     "1 bound PersistentVolume keeps its old mount options until remounted"], None)
        assert settled(lambda dry: apply(cluster, changed, dry_run=dry), expected) == expected
        ready(kube, name, version=2)

        old_class = pvc(namespace, "old-class", f"{name}-v1", labels=consumer)
        expected = ([f"StorageClass {name}-v1 is superseded by {name}-v2 (StorageProfile {name})"], None)
        assert settled(lambda dry: create(cluster, old_class, dry_run=dry), expected) == expected

        wrong_class = pvc(namespace, "wrong-class", labels=consumer)
        expected = ([f"PVC {namespace}/wrong-class is a consumer of StorageProfile {name} but asks for StorageClass "
                     f"{PROBE_CLASS}: use storageClassName {name}-v2", UNGOVERNED_PROBE], None)
        assert settled(lambda dry: create(cluster, wrong_class, dry_run=dry), expected) == expected

        assert answer(create(cluster, pvc(namespace, "right-class", f"{name}-v2", labels=consumer))) == NOTHING
    finally:
        kube.core.delete_persistent_volume(f"pv-{unique}")


def test_a_deny_profile_refuses_its_consumers_with_the_same_message(cluster, kube, webhook, namespace, unique,
                                                                     profiles):
    name = f"strict-{unique}"
    consumer = {"app": name}
    profiles.append(name)
    apply(cluster, profile(name, consumers={"pvcSelector": {"matchLabels": consumer}}, enforcement="deny",
                           sqlite="forbid"))
    ready(kube, name)

    wrong_class = pvc(namespace, "wrong-class", labels=consumer)
    expected = ([UNGOVERNED_PROBE], f"PVC {namespace}/wrong-class is a consumer of StorageProfile {name} but asks "
                                    f"for StorageClass {PROBE_CLASS}: use storageClassName {name}-v1")
    assert settled(lambda dry: create(cluster, wrong_class, dry_run=dry), expected) == expected

    sqlite = pvc(namespace, "db", f"{name}-v1", labels=consumer, annotations={"mountwarden.io/contents": "sqlite"})
    expected = ([], f"PVC {namespace}/db holds SQLite but StorageClass {name}-v1 is NFS: WAL is impossible and every "
                    "lock is a network round trip; use a local volume")
    assert settled(lambda dry: create(cluster, sqlite, dry_run=dry), expected) == expected

    assert answer(create(cluster, pvc(namespace, "not-a-consumer"))) == ([UNGOVERNED_PROBE], None)
    assert kube.core.read_namespaced_persistent_volume_claim("not-a-consumer", namespace)
    for refused in ("wrong-class", "db"):
        with pytest.raises(kubernetes.client.ApiException):
            kube.core.read_namespaced_persistent_volume_claim(refused, namespace)


def test_sqlite_on_nfs_warns(cluster, webhook, namespace):
    sqlite = pvc(namespace, "cache", labels={"mountwarden.io/contents": "sqlite"})
    assert answer(create(cluster, sqlite)) == ([
        UNGOVERNED_PROBE,
        f"PVC {namespace}/cache holds SQLite but StorageClass {PROBE_CLASS} is NFS: WAL is impossible and every lock "
        "is a network round trip; use a local volume",
    ], None)


def test_the_default_class_of_a_profile_that_does_not_govern_the_pvc(cluster, kube, webhook, namespace, unique,
                                                                     profiles):
    name = f"shared-{unique}"
    profiles.append(name)
    apply(cluster, profile(name, consumers={"pvcSelector": {"matchLabels": {"app": name}}}, default=True))
    ready(kube, name)
    no_class = pvc(namespace, "no-class", None)
    expected = ([f"PVC {namespace}/no-class gets the default StorageClass {name}-v1, but StorageProfile {name} does not "
                 "govern it: set spec.storageClassName"], None)
    assert settled(lambda dry: create(cluster, no_class, dry_run=dry), expected) == expected
    # Its consumers may take the default.
    assert answer(create(cluster, pvc(namespace, "consumer", None, labels={"app": name}))) == NOTHING


def test_a_profile_with_an_unknown_option_is_denied_naming_the_field(cluster, kube, webhook, unique):
    name = f"typo-{unique}"
    warnings, denial = answer(apply(cluster, profile(name, mountOptions=["hard", "nconect=4"])))
    assert warnings == []
    assert denial.startswith(f"StorageProfile {name} is invalid: spec.mountOptions[1]: unknown option 'nconect'. "
                             "Did you mean 'nconnect'?")
    assert kube.profile(name) is None


def test_a_profile_with_the_imports_flags_on_efs_is_warned_of_their_cost_whatever_the_credits(cluster, kube, webhook,
                                                                                               unique, profiles):
    # No credit watch has read the file system's throughput mode: the warning does not wait for it.
    name = f"import-{unique}"
    profiles.append(name)
    warnings, denial = answer(apply(cluster, profile(name, "cached", mountOptions=["sync", "actimeo=0",
                                                                                  "lookupcache=none"])))
    assert denial is None
    (warning,) = [w for w in warnings if "sync, actimeo=0, lookupcache=none" in w]
    assert warning.startswith(f"StorageProfile {name}: spec.mountOptions: on EFS sync, actimeo=0, lookupcache=none "
                              "make every stat() and open() a round trip per path component")
    assert "metered as at least 4 KiB on EFS" in warning and "use cachePolicy staging" in warning
    assert "the file system's credits or throughput mode" in warning


def test_overlapping_consumers_are_named(cluster, kube, webhook, unique, profiles):
    first, second = f"web-{unique}", f"web-fast-{unique}"
    profiles.extend([first, second])
    consumers = {"pvcSelector": {"matchLabels": {"app": f"web-{unique}"}}}
    apply(cluster, profile(first, consumers=consumers))
    ready(kube, first)
    expected = ([f"StorageProfile {second}: spec.consumers overlaps those of StorageProfile {first}: a PVC matching "
                 "both gets two contracts; narrow one of the selectors"], None)
    assert settled(lambda dry: apply(cluster, profile(second, consumers=consumers), dry_run=dry), expected) == expected


def test_kube_system_never_waits_on_the_webhook(cluster, webhook, unique):
    claim = pvc("kube-system", f"system-{unique}")
    try:
        assert answer(create(cluster, claim)) == NOTHING
    finally:
        cluster.kubectl("delete", "pvc", "-n", "kube-system", f"system-{unique}", "--wait=false")


def deny_profile(cluster, kube, namespace: str, unique: str, profiles: list[str]) -> tuple[str, dict, dict]:
    """A deny profile governing app=<its name>, indexed by the operator; a claim it refuses and one it admits."""
    name = f"guarded-{unique}"
    profiles.append(name)
    apply(cluster, profile(name, consumers={"pvcSelector": {"matchLabels": {"app": name}}}, enforcement="deny"))
    ready(kube, name)
    refused = pvc(namespace, "wrong-class", labels={"app": name})
    settled(lambda dry: create(cluster, refused, dry_run=dry), ([UNGOVERNED_PROBE], (
        f"PVC {namespace}/wrong-class is a consumer of StorageProfile {name} but asks for StorageClass "
        f"{PROBE_CLASS}: use storageClassName {name}-v1")))
    return name, refused, pvc(namespace, "guarded", f"{name}-v1", labels={"app": name})


def test_locally_no_webhook_fails_closed(kube, webhook):
    assert {hook["failure_policy"] for hook in configuration(kube)["webhooks"]} == {"Ignore"}


@pytest.mark.chaos
def test_a_local_operator_killed_outright_blocks_no_claim_not_even_a_deny_profiles(cluster, kube, webhook, operator,
                                                                                  namespace, unique, profiles):
    name, refused, guarded = deny_profile(cluster, kube, namespace, unique, profiles)
    operator.stop(signal.SIGKILL)  # no chance to withdraw anything
    try:
        assert configuration(kube) is not None, "the killed operator's configuration is still registered"
        # At once, not after some timeout: nothing registered waits on the dead process.
        assert answer(create(cluster, guarded)) == NOTHING
        assert answer(create(cluster, refused)) == NOTHING
        assert answer(create(cluster, pvc(namespace, "anyone"))) == NOTHING
    finally:
        operator.start()
    wait_until_answering(cluster)


def test_a_hung_local_operator_holds_back_nobody(cluster, kube, webhook, operator, namespace, unique, profiles):
    name, _, guarded = deny_profile(cluster, kube, namespace, unique, profiles)
    os.killpg(operator.process.pid, signal.SIGSTOP)  # alive, listening, never answering
    try:
        # failurePolicy Ignore: after the 3 s timeout the PVC is created, without warnings, a deny profile's too.
        assert answer(create(cluster, pvc(namespace, "anyone"))) == NOTHING
        assert answer(create(cluster, guarded)) == NOTHING
    finally:
        os.killpg(operator.process.pid, signal.SIGCONT)
    wait_until_answering(cluster)


FAULTY_REVIEW = """
import mountwarden.handlers.admission as admission

def review_claim(claim, view):
    raise RuntimeError(f"a fault injected into the review of {claim.name}")

admission.review_claim = review_claim
"""


@pytest.mark.chaos
def test_a_failing_review_fails_closed_only_where_a_deny_profile_governs(cluster, kube, webhook, operator, namespace,
                                                                         unique, profiles, tmp_path):
    """Every PVC review raises; the API server applies each calling webhook's failurePolicy.

    The deny profile's webhook is failurePolicy Fail in a cluster (the chart's enforce configuration, written
    by the active replica); here the test registers the same webhook, rendered by the same code, for the
    local server.
    """
    name, _, guarded = deny_profile(cluster, kube, namespace, unique, profiles)
    operator.stop()
    faulty = OperatorProcess(str(cluster.kubeconfig), tmp_path, extra_env=operator.extra_env, fault=FAULTY_REVIEW)
    faulty.start()
    admissionregistration = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    enforce = f"mw-test-enforce-{unique}"
    try:
        registered = wait_for(lambda: configuration(kube), what="the faulty operator's configuration")
        client = registered["webhooks"][0]["client_config"]
        server = {"url": client["url"].removesuffix(f"/{PVC_WEBHOOK}"), "caBundle": client["ca_bundle"]}
        admissionregistration.create_validating_webhook_configuration(render_enforcement(
            server, name=enforce, excluded=["kube-system"],
            enforcing=[ProfileEntry(name, "efs.csi.aws.com", pvc_selector={"matchLabels": {"app": name}},
                                    enforcement="deny")]))

        def review_fails() -> bool:  # once the indexes are filled, every review reaches the fault
            create(cluster, guarded, dry_run=True)
            return "a fault injected into the review of guarded" in faulty.logs()

        wait_for(review_fails, timeout=120, what="the faulty operator reviewing claims")
        refused = create(cluster, guarded)
        assert refused.returncode != 0, "a claim a deny profile governs was admitted unreviewed"
        assert f'failed calling webhook "{name}.enforce.mountwarden.io"' in refused.stderr
        # Fail open: a claim only the warning webhook sees goes through, without a word.
        assert answer(create(cluster, pvc(namespace, "anyone"))) == NOTHING
        faulty.assert_running()
    finally:
        admissionregistration.delete_validating_webhook_configuration(enforce)
        faulty.stop()
        operator.start()
    wait_until_answering(cluster)


def test_a_stopped_operator_withdraws_its_configuration(cluster, kube, webhook, operator, namespace):
    operator.stop()
    assert configuration(kube) is None
    assert answer(create(cluster, pvc(namespace, "while-stopped"))) == NOTHING
    operator.start()
    wait_until_answering(cluster)
    assert configuration(kube) is not None
