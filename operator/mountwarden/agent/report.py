"""Writing the node's NodeMountReport: only its own, only when it changed, and safely under conflicts.

A report is rewritten when anything but the counters and the scan time changed
(a volume came or went, options or sharing changed), or as a heartbeat when the
stored one is older than the heartbeat interval, so that the API server is not
written to every scan by every node. The stored report is the memory: a
restarted agent (or ``--once``) compares with it and writes nothing new.
"""

import logging
from datetime import timedelta
from enum import StrEnum
from typing import Any

import kubernetes
from kubernetes.client import ApiClient, ApiException
from pydantic import ValidationError

from mountwarden.adapters.rest import Rest, path
from mountwarden.api.base import API_VERSION, GROUP, VERSION
from mountwarden.api.nodemountreport import KIND, PLURAL, NodeMountReportSpec

log = logging.getLogger(__name__)

#: Seconds to wait for the API server per request: a hung call must not stall the scan loop.
REQUEST_TIMEOUT = (5, 20)
#: Attempts per write when another writer changed the object in between (409 Conflict).
WRITE_ATTEMPTS = 4


class WriteOutcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"  # something other than counters and scan time changed
    HEARTBEAT = "heartbeat"  # nothing changed, but the stored report was getting old
    UNCHANGED = "unchanged"  # nothing written
    PRINTED = "printed"  # --dry-run: shown on stdout, not written


#: The outcomes that wrote to the API server.
WRITTEN = frozenset({WriteOutcome.CREATED, WriteOutcome.UPDATED, WriteOutcome.HEARTBEAT})


class RefusedWrite(RuntimeError):
    """Writing would put this agent's findings in another node's report: a configuration error."""


class WriteConflict(RuntimeError):
    """The report kept changing under us for every attempt."""


def content(spec: NodeMountReportSpec) -> dict[str, Any]:
    """The part of a report whose change is worth a write: all but counters, the mount age and the scan time.

    A failure counts by what it is about, not by its message, which may say more as it goes on.
    """
    wire = spec.to_wire()
    wire.pop("scanTime", None)
    wire["failures"] = sorted(repr(failure.identity()) for failure in spec.failures)
    for volume in wire.get("volumes", []):
        volume.pop("operations", None)
        volume.pop("ageSeconds", None)  # grows every scan, like the counters it goes with
        volume.pop("activity", None)  # rates and samples change every scan: /metrics serves them live
        volume.pop("processes", None)
    return wire


def report_body(
    spec: NodeMountReportSpec,
    *,
    owner: dict[str, Any] | None,
    resource_version: str | None,
    stored_metadata: dict[str, Any] | None = None,
) -> dict:
    """The whole object; a replace keeps the labels, annotations and owners others put on the stored one."""
    stored_metadata = stored_metadata or {}
    metadata: dict[str, Any] = {"name": spec.node_name}
    for kept in ("labels", "annotations", "ownerReferences"):
        if stored_metadata.get(kept):
            metadata[kept] = stored_metadata[kept]
    if owner is not None and not any(ref.get("uid") == owner["uid"] for ref in metadata.get("ownerReferences", [])):
        # Owned by its Node: deleting the node garbage-collects its report.
        metadata["ownerReferences"] = [*metadata.get("ownerReferences", []), owner]
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version  # replace only the version we compared with
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec.to_wire()}


def _stored_spec(report: dict[str, Any]) -> NodeMountReportSpec | None:
    try:
        return NodeMountReportSpec.model_validate(report.get("spec") or {})
    except ValidationError:
        return None  # written by another version of the agent: rewrite it in ours


class ReportWriter:
    """Writes the NodeMountReport named after ``node_name`` and no other."""

    def __init__(
        self,
        api_client: ApiClient,
        node_name: str,
        *,
        heartbeat_seconds: float = 300.0,
        host_boot_id: str | None = None,
    ) -> None:
        self.node_name = node_name
        self.heartbeat = timedelta(seconds=heartbeat_seconds)
        self.host_boot_id = host_boot_id
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._rest = Rest(api_client)
        #: The report as last read or written, so that an unchanged scan costs no API call.
        self._stored: dict[str, Any] | None = None
        self._owner: dict[str, Any] | None = None
        self._node_checked = False

    def check_node(self) -> None:
        """Make sure ``node_name`` is the node this agent runs on, before anything is written.

        The Node must exist; when both the Node (status.nodeInfo.bootID, which the
        kubelet reads from the same kernel file) and the host give a boot ID, they
        must be equal. A wrong NODE_NAME would otherwise overwrite another node's
        report with this node's mounts, every scan.
        """
        try:
            node = self._rest.get(path("v1", "nodes", self.node_name), timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                raise RefusedWrite(
                    f"there is no node named {self.node_name!r}: set --node-name (NODE_NAME) to this node's name, "
                    "from the downward API's spec.nodeName"
                ) from error
            if error.status == 403:
                log.warning("may not read node %s (%s): writing its report without checking that this agent runs "
                            "there, and without an owner reference", self.node_name, error.reason)
                self._node_checked = True
                return
            raise
        node_boot_id = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""
        if node_boot_id and self.host_boot_id and node_boot_id != self.host_boot_id:
            raise RefusedWrite(
                f"node {self.node_name!r} has boot ID {node_boot_id} but this host has {self.host_boot_id}: this agent "
                f"does not run on {self.node_name!r}. Set NODE_NAME from the downward API's spec.nodeName."
            )
        self._owner = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": node["metadata"]["uid"]}
        self._node_checked = True

    def sync(self, spec: NodeMountReportSpec) -> WriteOutcome:
        """Write the report if it changed or the heartbeat is due; say what was done."""
        if spec.node_name != self.node_name:
            raise RefusedWrite(f"this agent writes the report of {self.node_name!r}, not of {spec.node_name!r}")
        if not self._node_checked:
            self.check_node()  # once; an API error here is a failed write, retried next scan
        for _ in range(WRITE_ATTEMPTS):
            stored = self._stored if self._stored is not None else self._read()
            if stored is None:
                if self._create(spec):
                    return WriteOutcome.CREATED
                continue
            outcome = self._due(spec, stored)
            if outcome is WriteOutcome.UNCHANGED:
                return outcome
            if self._replace(spec, stored["metadata"]):
                return outcome
        raise WriteConflict(f"the NodeMountReport {self.node_name!r} changed under every one of "
                            f"{WRITE_ATTEMPTS} attempts to write it")

    def _due(self, spec: NodeMountReportSpec, stored: dict[str, Any]) -> WriteOutcome:
        previous = _stored_spec(stored)
        if previous is None or content(previous) != content(spec):
            return WriteOutcome.UPDATED
        if spec.scan_time - previous.scan_time >= self.heartbeat:
            return WriteOutcome.HEARTBEAT
        return WriteOutcome.UNCHANGED

    def _read(self) -> dict[str, Any] | None:
        try:
            self._stored = self._custom.get_cluster_custom_object(
                GROUP, VERSION, PLURAL, self.node_name, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status != 404:
                raise
            self._stored = None
        return self._stored

    def _create(self, spec: NodeMountReportSpec) -> bool:
        """Create the report; False when it appeared meanwhile (read it and try again)."""
        body = report_body(spec, owner=self._owner, resource_version=None)
        try:
            self._stored = self._custom.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, body, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status != 409:
                raise
            self._stored = None
            return False
        return True

    def _replace(self, spec: NodeMountReportSpec, stored_metadata: dict[str, Any]) -> bool:
        """Replace the version we compared with; False when it changed or vanished meanwhile."""
        body = report_body(spec, owner=self._owner, resource_version=stored_metadata["resourceVersion"],
                           stored_metadata=stored_metadata)
        try:
            self._stored = self._custom.replace_cluster_custom_object(
                GROUP, VERSION, PLURAL, self.node_name, body, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise
            log.info("NodeMountReport %s changed while being written (%s): reading it again",
                     self.node_name, error.status)
            self._stored = None
            return False
        return True
