"""Which workload a pod belongs to, as metrics and alerts name it: Kind/name of what a person deploys.

A Deployment's pods are controlled by a ReplicaSet named ``<deployment>-<pod-template-hash>`` (the
Deployment controller's naming, which it also writes into the pod's ``pod-template-hash`` label): the
Deployment is named, so that a new revision keeps its series. Any other controller (StatefulSet,
DaemonSet, Job, a ReplicaSet of its own) is named as it is; a bare pod as ``Pod/<name>``.
"""


def workload_of(owner_kind: str | None, owner_name: str | None, pod_name: str,
                pod_template_hash: str | None = None) -> str:
    if not owner_kind or not owner_name:
        return f"Pod/{pod_name}"
    suffix = f"-{pod_template_hash}" if pod_template_hash else ""
    if owner_kind == "ReplicaSet" and suffix and owner_name.endswith(suffix) and len(owner_name) > len(suffix):
        return f"Deployment/{owner_name[:-len(suffix)]}"
    return f"{owner_kind}/{owner_name}"
