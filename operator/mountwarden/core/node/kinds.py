"""Nodes where the agent cannot run, known by their labels, and why: a missing report there is no fault.

- EKS Fargate: every pod is its own micro-VM, and "DaemonSets aren't supported on Fargate" (EKS User
  Guide, "AWS Fargate considerations", https://docs.aws.amazon.com/eks/latest/userguide/fargate.html);
  its nodes carry ``eks.amazonaws.com/compute-type: fargate``. An agent pod sent there stays Pending
  for ever (the same reports as aws-efs-csi-driver#234 and #328 for the CSI node DaemonSet).
- virtual-kubelet nodes (Azure Container Instances' virtual nodes, among others) run pods elsewhere,
  with no host /proc to read; virtual-kubelet labels its node ``type: virtual-kubelet``.

The chart keeps the agent off these nodes with a required node affinity on the same labels
(values.yaml, ``agent.unsupportedNodes``), and off control-plane nodes unless ``agent.controlPlaneNodes``
asks for them (the operator then runs with ``--no-agent-on-control-plane``): a choice, not a limit, said as such.
"""

from collections.abc import Mapping
from dataclasses import dataclass

ZONE_LABEL = "topology.kubernetes.io/zone"

#: (label, value) -> what kind of node that is and why no agent runs there.
UNSUPPORTED_NODE_LABELS: Mapping[tuple[str, str], str] = {
    ("eks.amazonaws.com/compute-type", "fargate"):
        "an EKS Fargate node (eks.amazonaws.com/compute-type=fargate): Fargate runs no DaemonSets, so no "
        "mountwarden agent runs there",
    ("type", "virtual-kubelet"):
        "a virtual node (type=virtual-kubelet): its pods run outside any host the agent could read",
}


#: kubeadm's (and most installers') label of a control-plane node; its value is empty.
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
NOT_ON_CONTROL_PLANE = (f"a control-plane node ({CONTROL_PLANE_LABEL}): the chart keeps the agent off control-plane "
                        "nodes unless agent.controlPlaneNodes is true")


def why_no_agent(labels: Mapping[str, str], *, control_plane_excluded: bool = False) -> str | None:
    """Why no agent runs on a node with these labels (``control_plane_excluded``: none is sent to a control-plane
    node); None when one does."""
    if control_plane_excluded and CONTROL_PLANE_LABEL in labels:
        return NOT_ON_CONTROL_PLANE
    return next((why for (label, value), why in UNSUPPORTED_NODE_LABELS.items() if labels.get(label) == value), None)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the operator keeps of a Node: its zone (CrossAZMount) and why no agent runs there, if none can."""

    zone: str | None = None
    no_agent: str | None = None

    @classmethod
    def of(cls, labels: Mapping[str, str], *, control_plane_excluded: bool = False) -> "NodeFacts":
        return cls(labels.get(ZONE_LABEL) or None, why_no_agent(labels, control_plane_excluded=control_plane_excluded))
