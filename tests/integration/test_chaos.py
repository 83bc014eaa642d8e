"""Faults on purpose: the operator killed mid-reconcile, the API server restarted under it.

The end state must be what an undisturbed run makes: every profile Ready on the
class of its final spec, one class per version, no duplicate content, the kept
classes exactly those a volume holds.
"""

import random
import signal
import time

import pytest
from tests.integration.test_profiles import wait_held
from tests.support import profile_body, wait_for

from mountwarden.core.storageclass import HASH_ANNOTATION

pytestmark = [pytest.mark.cluster, pytest.mark.chaos]

POLICIES = ["strict", "staging", "cached", "read-only"]


def converged(kube, names, policies):
    """Every profile reconciled for its final generation, Ready, on one class carrying its options."""
    for name in names:
        body = kube.profile(name)
        status = body.get("status") or {}
        ready = kube.condition(name, "Ready")
        if not ready or ready["status"] != "True" or status.get("observedGeneration") != body["metadata"]["generation"]:
            return False
        if body["spec"]["cachePolicy"] != policies[name]:
            return False
    return True


def assert_clean_lineages(kube, names, held: dict[str, str]):
    for name in names:
        classes = kube.classes_of(name)
        status = kube.profile(name)["status"]
        current = status["storageClassName"]
        hashes = [cls.metadata.annotations[HASH_ANNOTATION] for cls in classes.values()]
        assert len(hashes) == len(set(hashes)), f"{name}: two classes with the same content: {sorted(classes)}"
        versions = [int(cls.metadata.labels["mountwarden.io/version"]) for cls in classes.values()]
        assert len(versions) == len(set(versions)), f"{name}: duplicate versions {versions}"
        expected = {current} | ({held[name]} if name in held and held[name] != current else set())
        assert set(classes) == expected, f"{name}: classes {sorted(classes)}, expected {sorted(expected)}"
        assert classes[current].mount_options == status["effectiveMountOptions"]


def test_operator_killed_at_random_points_of_reconciles_converges(kube, operator, unique):
    rng = random.Random(unique)
    names = [f"chaos-{unique}-{n}" for n in range(5)]
    policies = {name: "staging" for name in names}
    for name in names:
        kube.apply_profile(profile_body(name, policies[name]))
    wait_for(lambda: converged(kube, names, policies), timeout=90, what="first reconcile")
    # A volume holds one profile's first version: that class must survive every crash, once.
    held = {names[0]: f"{names[0]}-v1"}
    kube.core.create_persistent_volume({
        "metadata": {"name": f"pv-chaos-{unique}"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": held[names[0]], "persistentVolumeReclaimPolicy": "Retain",
                 "nfs": {"server": "nas.example.com", "path": "/"}},
    })
    wait_held(kube, names[0], held[names[0]])

    for _ in range(10):
        for name in rng.sample(names, 3):
            policies[name] = rng.choice(POLICIES)
            kube.apply_profile(profile_body(name, policies[name]))
        time.sleep(rng.uniform(0.0, 1.5))  # somewhere inside the reconciles those changes started
        operator.restart(signal.SIGKILL)

    wait_for(lambda: converged(kube, names, policies), timeout=120, what="convergence after 10 kills")
    assert_clean_lineages(kube, names, held)
    operator.assert_running()
    kube.core.delete_persistent_volume(f"pv-chaos-{unique}")


def test_api_server_restarted_during_reconciles(cluster, kube, operator, unique):
    if cluster.dev_cluster is None:
        pytest.skip("restarting the API server needs the local control plane, not an existing cluster")
    names = [f"outage-{unique}-{n}" for n in range(4)]
    policies = {name: "staging" for name in names}
    for name in names:
        kube.apply_profile(profile_body(name, policies[name]))
    # Changes the operator is working on when the API server goes away...
    for name in names[:2]:
        policies[name] = "cached"
        kube.apply_profile(profile_body(name, "cached"))
    cluster.dev_cluster.restart("kube-apiserver")
    # ...and changes made right after it is back, before the operator's watches reconnect:
    # a re-list must deliver them.
    for name in names[2:]:
        policies[name] = "strict"
        kube.apply_profile(profile_body(name, "strict"))

    wait_for(lambda: converged(kube, names, policies), timeout=180, what="convergence after the outage")
    assert_clean_lineages(kube, names, {})
    operator.assert_running()
    # The operator still serves new work, not only what it re-listed.
    late = f"outage-{unique}-late"
    kube.apply_profile(profile_body(late, "read-only"))
    wait_for(lambda: converged(kube, [late], {late: "read-only"}), timeout=60, what="a profile created afterwards")
