"""A node simulator for tests: the kernel of tests/procsim.py under the agent's own code, on kwok nodes.

kwok nodes have no kubelet and no NFS client, so nothing is mounted. tests/procsim.py
stands in for the kubelet and the kernel: it mounts each started pod's NFS volume with its
PV's options of that moment, keeps superblocks alive while any mount holds them, shares
them as the kernel lab measured, and writes each node's /proc as the kernel prints it.
This simulator then runs mountwarden's node agent on each node's proc root, in-process
(mountwarden.agent.loop.Agent: the same scan and the same ReportWriter as `mountwarden
agent`), whenever that node's mount table changed, so the NodeMountReports are exactly what
the real agent writes for such a node.

It runs as a background thread of the test process and never touches a pod.
"""

import tempfile
from pathlib import Path

import kubernetes
from tests.procsim import NodeState, ProcRootSimulator, one_file_system_per_server

from mountwarden.agent.loop import Agent, AgentSettings
from mountwarden.agent.report import ReportWriter
from mountwarden.core.node.scan import DEFAULT_NETWORK_FSTYPES


class NodeSimulator(ProcRootSimulator):
    """ProcRootSimulator's nodes, each scanned and reported by the agent's own code."""

    def __init__(self, api_client: kubernetes.client.ApiClient, nodes: list[str], interval: float = 0.3,
                 file_system_of=one_file_system_per_server) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="mountwarden-nodesim-")
        super().__init__(api_client, nodes, Path(self._scratch.name), interval=interval,
                         file_system_of=file_system_of)
        self.agents = {name: self._agent(api_client, name) for name in nodes}

    def _agent(self, api_client, node: str) -> Agent:
        settings = AgentSettings(node_name=node, proc_root=self.proc_root(node), kubelet_root="/var/lib/kubelet",
                                 network_fstypes=DEFAULT_NETWORK_FSTYPES, interval_seconds=self.interval,
                                 metrics_port=0, probe_timeout_seconds=0, process_samples=0)
        return Agent(settings, ReportWriter(api_client, node, heartbeat_seconds=300))

    def written(self, name: str, state: NodeState) -> None:
        if not self.agents[name].step(woken=True):
            raise RuntimeError(f"the agent's scan or write for node {name} failed (see the log)")

    def stop(self) -> None:
        super().stop()
        self._scratch.cleanup()
