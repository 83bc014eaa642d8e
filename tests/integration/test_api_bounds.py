"""What the API server itself refuses, from the CRDs generated from the pydantic models: no operator runs here.

A profile whose name cannot be a label value, a label selector the API server would refuse later inside a
webhook configuration, and a node report's unbounded strings are refused at creation, with the reason.
"""

import json
import subprocess
import uuid

import pytest
from tests.support import profile_body, report_spec

pytestmark = pytest.mark.cluster


def create(cluster, obj: dict) -> subprocess.CompletedProcess:
    return cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)


def delete(cluster, kind: str, name: str) -> None:
    cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)


def named(length: int) -> str:
    stem = f"long-{uuid.uuid4().hex[:6]}-"
    return stem + "x" * (length - len(stem))


def test_a_profile_name_longer_than_a_label_value_is_refused_with_the_reason(cluster, crds_installed):
    too_long, longest = named(64), named(63)
    try:
        refused = create(cluster, profile_body(too_long, "cached"))
        assert refused.returncode != 0
        assert "is the value of the label mountwarden.io/profile on its StorageClasses: at most 63 characters; " \
               "choose a shorter name" in refused.stderr, refused.stderr
        accepted = create(cluster, profile_body(longest, "cached"))
        assert accepted.returncode == 0, accepted.stderr
    finally:
        delete(cluster, "storageprofile", too_long)
        delete(cluster, "storageprofile", longest)


@pytest.mark.parametrize(("consumers", "said"), [
    ({"pvcSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}},
     "operators In and NotIn need at least one value; Exists and DoesNotExist take none"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["db"]}]}},
     "operators In and NotIn need at least one value; Exists and DoesNotExist take none"),
    ({"pvcSelector": {"matchLabels": {"not a key": "db"}}}, "every matchLabels key must be a label key"),
    ({"pvcSelector": {"matchLabels": {"app": "-db"}}}, "spec.consumers.pvcSelector.matchLabels.app"),
    ({"pvcSelector": {"matchExpressions": [{"key": "app/", "operator": "Exists"}]}},
     "spec.consumers.pvcSelector.matchExpressions[0].key"),
])
def test_a_selector_the_api_server_would_refuse_later_is_refused_at_once(cluster, crds_installed, consumers, said):
    name = f"selector-{uuid.uuid4().hex[:6]}"
    try:
        refused = create(cluster, profile_body(name, "cached", consumers=consumers, enforcement="deny"))
        assert refused.returncode != 0, "a selector the API server refuses in a webhook configuration was stored"
        assert said in refused.stderr, refused.stderr
    finally:
        delete(cluster, "storageprofile", name)


def test_a_valid_selector_is_accepted(cluster, crds_installed):
    name = f"selector-{uuid.uuid4().hex[:6]}"
    consumers = {"pvcSelector": {"matchLabels": {"example.com/app": "db"},
                                 "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["test"]},
                                                      {"key": "legacy", "operator": "DoesNotExist"}]}}
    try:
        accepted = create(cluster, profile_body(name, "cached", consumers=consumers, enforcement="deny"))
        assert accepted.returncode == 0, accepted.stderr
    finally:
        delete(cluster, "storageprofile", name)


def report(node: str, **volume) -> dict:
    volume = {"podUid": "0b5e1a9c", "volumeName": "pv-a", "mountPoint": "/var/lib/kubelet/pods/0b5e1a9c/x",
              "superblock": "0:52", "effectiveOptions": ["vers=4.1"], **volume}
    return {"apiVersion": "mountwarden.io/v1alpha1", "kind": "NodeMountReport", "metadata": {"name": node},
            "spec": report_spec(node, volumes=[volume])}


def test_a_report_with_a_mebibyte_server_string_is_refused(cluster, crds_installed):
    node = f"node-{uuid.uuid4().hex[:6]}"
    try:
        refused = create(cluster, report(node, server="s" * (1 << 20)))
        assert refused.returncode != 0, "a 1 MiB server string was stored in a NodeMountReport"
        assert "spec.volumes[0].server: Too long: may not be" in refused.stderr, refused.stderr[:2000]
        accepted = create(cluster, report(node, server="fs-0123456789abcdef0.efs.us-east-1.amazonaws.com"))
        assert accepted.returncode == 0, accepted.stderr
    finally:
        delete(cluster, "nodemountreport", node)


def test_a_report_with_too_many_volumes_is_refused(cluster, crds_installed):
    node = f"node-{uuid.uuid4().hex[:6]}"
    body = report(node, server="fs-1.efs")
    body["spec"]["volumes"] = body["spec"]["volumes"] * 2049
    try:
        refused = create(cluster, body)
        assert refused.returncode != 0, "a report of 2049 volumes was stored"
        assert "spec.volumes: Too many: 2049: must have at most 2048 items" in refused.stderr, refused.stderr[:2000]
    finally:
        delete(cluster, "nodemountreport", node)
