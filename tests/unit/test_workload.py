"""Which workload a pod's series name (core/workload.py)."""

import pytest

from mountwarden.core.workload import workload_of


@pytest.mark.parametrize(("owner", "pod", "template_hash", "workload"), [
    (("ReplicaSet", "web-7d9f8c6b5"), "web-7d9f8c6b5-x2k4q", "7d9f8c6b5", "Deployment/web"),
    (("ReplicaSet", "batch"), "batch-x2k4q", None, "ReplicaSet/batch"),  # a ReplicaSet of its own
    (("ReplicaSet", "web-abc"), "web-abc-1", "zzz", "ReplicaSet/web-abc"),  # the hash is not its suffix
    (("StatefulSet", "db"), "db-0", None, "StatefulSet/db"),
    ((None, None), "debug", None, "Pod/debug"),
])
def test_a_pod_is_named_by_what_a_person_deployed(owner, pod, template_hash, workload):
    assert workload_of(*owner, pod, template_hash) == workload
