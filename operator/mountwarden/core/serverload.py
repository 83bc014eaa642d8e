"""How much each server carries for a profile, across the cluster: mounts, nodes and bytes per second.

A gateway that is one node's network interface (an NFSv3 gateway in front of S3, say) is a funnel:
every client's bytes go through it, so its load is the sum over the cluster, not any one mount's.
Whether it should be there at all follows the gateway study's decision rule, applied to the load the
agents measure: a gateway is for data many nodes share (one volume mounted on several nodes); data each
node reads alone (a volume only one node mounts) is better read from the backing store per node, or
copied local, than funnelled through one interface.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mountwarden.core.compliance import Consumer
from mountwarden.core.node.activity import GBIT
from mountwarden.core.node.report import NodeReport
from mountwarden.core.vocabulary import BackendKind

#: What status.servers holds of one server's name, and how many servers: a report's server string is the node's
#: to choose, and status is shared by every node's volumes of the profile.
SERVER_NAME_MAX = 253
SERVERS_MAX = 32


@dataclass(frozen=True, slots=True)
class MountLoad:
    """One pod volume's server and recent throughput, as its node reported it."""

    server: str
    node: str
    #: The PersistentVolume: the same one on several nodes is data they share.
    volume: str
    read_bytes_per_second: float | None
    write_bytes_per_second: float | None


def mount_loads(consumers: Iterable[Consumer], reports: Mapping[str, NodeReport]) -> list[MountLoad]:
    """The server and recent throughput of every consumer's volume that its node's report shows."""
    loads = []
    for consumer in consumers:
        report = reports.get(consumer.node or "")
        volume = report.mount_of(consumer.pod_uid, (consumer.volume_name,)) if report else None
        server = volume.server if volume else None
        if volume is None or not server:
            continue
        activity = volume.activity
        loads.append(MountLoad(server, consumer.node or "", consumer.volume_name,
                               activity.read_bytes_per_second if activity else None,
                               activity.write_bytes_per_second if activity else None))
    return loads


def server_load(mounts: Iterable[MountLoad], *, kind: str) -> list[dict]:
    """status.servers: per server, its mounts, nodes and bytes per second, busiest first."""
    grouped: dict[str, list[MountLoad]] = defaultdict(list)
    for mount in mounts:
        grouped[bounded_server_name(mount.server)].append(mount)
    rows = []
    for server, loads in grouped.items():
        read = sum(load.read_bytes_per_second or 0.0 for load in loads)
        write = sum(load.write_bytes_per_second or 0.0 for load in loads)
        nodes = len({load.node for load in loads})
        message = ""
        if kind == BackendKind.NFSV3_GATEWAY:
            message = (f"{len(loads)} mount(s) on {nodes} node(s) share this gateway's network interface: "
                       f"{(read + write) / GBIT:.2f} Gbit/s together, and every one of them slows when it is full "
                       f"(a funnel). {_gateway_rule(loads)}")
        rows.append({"server": server, "mounts": len(loads), "nodes": nodes, "readBytesPerSecond": read,
                     "writeBytesPerSecond": write, "message": message})
    busiest = sorted(rows, key=lambda row: (-(row["readBytesPerSecond"] + row["writeBytesPerSecond"]), row["server"]))
    return busiest[:SERVERS_MAX]


def bounded_server_name(server: str) -> str:
    """A server's name as status holds it: cut, and marked so, past SERVER_NAME_MAX characters."""
    if len(server) <= SERVER_NAME_MAX:
        return server
    return server[:SERVER_NAME_MAX - 3] + "..."


def _bytes(load: MountLoad) -> float:
    return (load.read_bytes_per_second or 0.0) + (load.write_bytes_per_second or 0.0)


def _gateway_rule(loads: list[MountLoad]) -> str:
    """The gateway study's rule on the measured load: shared data belongs behind a gateway, each node's own not."""
    nodes_of: dict[str, set[str]] = defaultdict(set)
    for load in loads:
        nodes_of[load.volume].add(load.node)
    shared = sum(_bytes(load) for load in loads if len(nodes_of[load.volume]) > 1)
    own = sum(_bytes(load) for load in loads if len(nodes_of[load.volume]) == 1)
    if len({load.node for load in loads}) < 2:
        return "One node uses it: nothing is funnelled yet."
    if shared >= own:
        many = max(len(nodes) for nodes in nodes_of.values())
        return (f"Up to {many} nodes read the same volume through it: data many nodes share is what a gateway is "
                "for (the gateway study's rule); add gateways and spread the consumers before its interface is "
                "full.")
    return ("Most of its bytes are volumes that one node alone reads: data each node reads by itself does not "
            "need a gateway (the gateway study's rule); mount the backing store per node, or copy the data to "
            "local storage, and those bytes stop sharing one interface.")
