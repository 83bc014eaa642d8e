"""The SQLiteOnNFS remedy's YAML is what a real kube-apiserver accepts in a pod, both alternatives.

The finding hands the user a local volume to apply: an emptyDir with a sizeLimit and an
ephemeral-storage request, or (commented out) a generic ephemeral volume. A server-side dry run
validates each the way `kubectl apply` of the workload would.
"""

import json

import pytest
import yaml

from mountwarden.core.sqlite import LOCAL_VOLUME_YAML

pytestmark = pytest.mark.cluster

ALTERNATIVE_MARKER = "# Or a generic ephemeral volume"


def pod_with(spec: dict, namespace: str, name: str) -> dict:
    for container in spec["containers"]:
        container.setdefault("image", "registry.k8s.io/pause:3.10")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def the_two_pod_specs() -> tuple[dict, dict]:
    """(the emptyDir pod spec, the same with the commented generic ephemeral volume instead)."""
    empty_dir = yaml.safe_load(LOCAL_VOLUME_YAML)["spec"]
    commented = LOCAL_VOLUME_YAML.split(ALTERNATIVE_MARKER, 1)[1].splitlines()[1:]
    ephemeral = yaml.safe_load(yaml.safe_dump(empty_dir))
    ephemeral.update(yaml.safe_load("\n".join(line.removeprefix("#") for line in commented)))
    return empty_dir, ephemeral


def test_both_local_alternatives_are_pods_the_apiserver_accepts(cluster, namespace):
    empty_dir, ephemeral = the_two_pod_specs()
    assert empty_dir["volumes"][0]["emptyDir"]["sizeLimit"] == "10Gi"
    assert empty_dir["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "10Gi"
    assert "ephemeral" in ephemeral["volumes"][0] and "emptyDir" not in ephemeral["volumes"][0]
    for name, spec in (("sqlite-emptydir", empty_dir), ("sqlite-ephemeral", ephemeral)):
        result = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                 input=json.dumps(pod_with(spec, namespace, name)), check=False)
        assert result.returncode == 0, f"{name}: {result.stderr}"
        accepted = json.loads(result.stdout)["spec"]
        assert accepted["volumes"][0]["name"] == "sqlite-data"
        mounts = accepted["containers"][0]["volumeMounts"]
        assert {"name": "sqlite-data", "mountPath": "/var/lib/app"} in [
            {key: mount[key] for key in ("name", "mountPath")} for mount in mounts]
