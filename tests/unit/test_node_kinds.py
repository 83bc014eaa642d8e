"""Nodes where no agent can run: known by their labels, and a missing report there explained, not asked about."""

from datetime import UTC, datetime, timedelta

from mountwarden.core.compliance import (
    NO_AGENT,
    Consumer,
    Contract,
    ProfileCompliance,
    VerdictReason,
    VolumeState,
    assess,
)
from mountwarden.core.node.kinds import NodeFacts, why_no_agent

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def test_fargate_and_virtual_kubelet_nodes_are_known_by_their_labels():
    assert "EKS Fargate" in why_no_agent({"eks.amazonaws.com/compute-type": "fargate"})
    assert "virtual node" in why_no_agent({"type": "virtual-kubelet"})
    # EKS's other compute types (EC2 nodes, Auto Mode) and kwok's simulated nodes run the agent.
    assert why_no_agent({"eks.amazonaws.com/compute-type": "ec2", "type": "kwok"}) is None
    assert NodeFacts.of({"topology.kubernetes.io/zone": "eu-west-1a"}) == NodeFacts("eu-west-1a", None)
    assert NodeFacts.of({}) == NodeFacts()


def test_a_control_plane_node_has_no_agent_only_when_the_chart_keeps_it_off():
    control_plane = {"node-role.kubernetes.io/control-plane": "", "topology.kubernetes.io/zone": "eu-west-1a"}
    assert why_no_agent(control_plane) is None  # --agent-on-control-plane, the operator's default
    why = why_no_agent(control_plane, control_plane_excluded=True)
    assert "control-plane node" in why and "agent.controlPlaneNodes" in why
    assert NodeFacts.of(control_plane, control_plane_excluded=True) == NodeFacts("eu-west-1a", why)
    assert why_no_agent({"kubernetes.io/role": "worker"}, control_plane_excluded=True) is None


def test_a_missing_report_is_explained_by_the_nodes_kind():
    consumer = Consumer("uid-1", "web", "api-0", "fargate-ip-10-0-1-7", "pv-1")
    explained = assess(consumer, Contract({}), {}, now=NOW, stale_after=timedelta(minutes=15),
                       no_agent={"fargate-ip-10-0-1-7": why_no_agent({"eks.amazonaws.com/compute-type": "fargate"})})
    assert (explained.state, explained.reason) == (VolumeState.UNKNOWN, VerdictReason.REPORT_MISSING)
    assert "EKS Fargate node" in explained.message and "cannot be audited" in explained.message
    asked = assess(consumer, Contract({}), {}, now=NOW, stale_after=timedelta(minutes=15))
    assert "is the mountwarden agent running there?" in asked.message


def test_metrics_count_a_report_no_agent_can_bring_apart_from_one_a_person_should_look_for():
    fargate, missing = "fargate-ip-10-0-1-7", "ip-10-0-2-9"
    no_agent = {fargate: why_no_agent({"eks.amazonaws.com/compute-type": "fargate"})}
    consumers = [Consumer("uid-1", "web", "api-0", fargate, "pv-1"), Consumer("uid-2", "web", "api-1", missing, "pv-1"),
                 Consumer("uid-3", "web", "api-2", missing, "pv-2"), Consumer("uid-4", "web", "api-3", None, "pv-1")]
    verdicts = [assess(c, Contract({}), {}, now=NOW, stale_after=timedelta(minutes=15), no_agent=no_agent)
                for c in consumers]
    assert ProfileCompliance.of(verdicts).unverified(no_agent) == {
        (fargate, NO_AGENT): 1, (missing, "ReportMissing"): 2, ("", "NotScheduled"): 1}
