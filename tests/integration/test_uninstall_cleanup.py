"""Deleting a profile finishes after the operator is gone for good (helm uninstall): `mountwarden cleanup`."""

import json
import subprocess
import sys

import pytest
from tests.support import profile_body, wait_for

from mountwarden.adapters.finalizers import FINALIZER

pytestmark = pytest.mark.cluster


def finalizers(kube, name: str) -> list[str] | None:
    body = kube.profile(name)
    return None if body is None else list(body["metadata"].get("finalizers") or [])


def test_profiles_left_with_the_finalizer_are_deletable_once_the_operator_is_gone(cluster, kube, operator, unique):
    deleted, kept = f"leaving-{unique}", f"staying-{unique}"
    for name in (deleted, kept):
        kube.apply_profile(profile_body(name, "cached", provisioner="nfs.csi.k8s.io",
                                        parameters={"server": "nfs.example", "share": "/"}))
    for name in (deleted, kept):
        wait_for(lambda name=name: FINALIZER in (finalizers(kube, name) or []), what=f"{name}'s finalizer")
    operator.stop()  # as helm uninstall leaves it: nobody owns the finalizer any more

    kube.delete_profile(deleted)
    stuck = kube.profile(deleted)
    assert stuck is not None and stuck["metadata"].get("deletionTimestamp"), "the deletion did not wait"

    cleanup = subprocess.run([sys.executable, "-m", "mountwarden", "cleanup", "--kubeconfig", str(cluster.kubeconfig),
                              "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert cleanup.returncode == 0, cleanup.stderr
    released = json.loads(cleanup.stdout)["released"]
    assert {"resource": "storageprofiles.mountwarden.io", "name": deleted, "deleting": True} in released
    assert {"resource": "storageprofiles.mountwarden.io", "name": kept, "deleting": False} in released
    wait_for(lambda: kube.profile(deleted) is None, what=f"{deleted} gone")
    assert finalizers(kube, kept) == []  # kept, and now deletable at once
    kube.delete_profile(kept)
    wait_for(lambda: kube.profile(kept) is None, what=f"{kept} gone")
