"""What makes a report worth writing, and the refusal to write another node's (the API side is in
tests/integration/test_agent_cluster.py, against a real API server)."""

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import ApiClient

from mountwarden.agent.report import RefusedWrite, ReportWriter, content, report_body
from mountwarden.api.nodemountreport import MountedVolume, NodeMountReportSpec, OperationSummary

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def spec(node="node-a", *, ops=10, options=("rw", "vers=4.1"), shared_with=(), scan_time=NOW, connections=1):
    volume = MountedVolume(
        pod_uid="uid-1", volume_name="pv-a", plugin="csi", mount_point="/var/lib/kubelet/pods/uid-1/volumes/"
        "kubernetes.io~csi/pv-a/mount", fstype="nfs4", source="fs-1:/", superblock="0:101",
        effective_options=list(options), options_source="mountstats", shared_with=list(shared_with),
        connections=connections, operations={"READ": OperationSummary(ops=ops, errors=0, avg_rtt_ms=ops / 7)},
    )
    return NodeMountReportSpec(node_name=node, scan_time=scan_time, agent_version="0.1.0",
                               network_fstypes=["nfs", "nfs4"], volumes=[volume])


def test_counters_and_scan_time_are_not_worth_a_write():
    assert content(spec(ops=10)) == content(spec(ops=99_999, scan_time=NOW + timedelta(minutes=3)))


@pytest.mark.parametrize(
    "changed",
    [
        spec(options=("rw", "vers=4.2")),
        spec(shared_with=("/var/lib/kubelet/pods/uid-2/volumes/kubernetes.io~csi/pv-a/mount",)),
        spec(connections=8),
        spec(node="node-a").model_copy(update={"volumes": []}),
        spec().model_copy(update={"agent_version": "0.2.0"}),
        spec().model_copy(update={"skipped_lines": 3}),
    ],
)
def test_anything_else_is(changed):
    assert content(changed) != content(spec())


def test_the_body_is_named_after_the_node_and_owned_by_it():
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "1234"}

    body = report_body(spec(), owner=owner, resource_version="77")

    assert body["apiVersion"] == "mountwarden.io/v1alpha1" and body["kind"] == "NodeMountReport"
    assert body["metadata"] == {"name": "node-a", "ownerReferences": [owner], "resourceVersion": "77"}
    assert body["spec"]["nodeName"] == "node-a"


def test_a_writer_refuses_another_nodes_report_before_any_api_call():
    # The client points nowhere: a call would fail with a connection error, not a refusal.
    writer = ReportWriter(ApiClient(), "node-a")

    with pytest.raises(RefusedWrite, match="node-b"):
        writer.sync(spec(node="node-b"))


def test_a_replace_keeps_what_others_put_on_the_stored_report():
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "1234"}
    stored = {"name": "node-a", "resourceVersion": "77", "labels": {"team": "storage"},
              "annotations": {"example.com/note": "x"}, "ownerReferences": [owner], "uid": "report-uid"}

    metadata = report_body(spec(), owner=owner, resource_version="77", stored_metadata=stored)["metadata"]

    assert metadata == {"name": "node-a", "labels": {"team": "storage"}, "annotations": {"example.com/note": "x"},
                        "ownerReferences": [owner], "resourceVersion": "77"}
