"""Userspace NFS clients: /proc/net/tcp read against the real /proc, and who counts as such a client.

The whole path (a real libnfs client in a pod's cgroup talking to knfsd, found by the agent) is in
tests/kernel/test_userspace_client.py.
"""

import os
import socket
import subprocess
import sys

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.userspace import scan_nfs_sockets
from mountwarden.core.node.userspace import SocketOwner, UserspaceClient, is_nfs_endpoint, userspace_clients
from mountwarden.core.procfs.tcp import TcpSocket, parse_tcp


def test_a_connection_this_process_holds_is_read_from_the_real_proc_with_its_inode():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            inode = os.fstat(client.fileno()).st_ino
            with open("/proc/self/net/tcp") as table:
                sockets = parse_tcp(table.read()).sockets
    (mine,) = [s for s in sockets if s.inode == inode]
    assert (mine.remote_address, mine.remote_port, mine.state) == ("127.0.0.1", port, "ESTABLISHED")
    assert mine.local_address == "127.0.0.1" and mine.remote == f"127.0.0.1:{port}"
    assert any(s.state == "LISTEN" and s.local_port == port for s in sockets)


def test_ipv6_addresses_and_malformed_lines():
    text = ("  sl  local_address                         remote_address                        st tx_queue rx_queue\n"
            "   0: 00000000000000000000000001000000:C35A 00000000000000000000000001000000:0801 01 00000000:00000000 "
            "00:00000000 00000000     0        0 4242 1 0000000000000000 20 4 30 10 -1\n"
            "   1: garbage\n")
    result = parse_tcp(text, byteorder="little")
    (connection,) = result.sockets
    assert (connection.remote_address, connection.remote_port, connection.inode) == ("::1", 2049, 4242)
    assert connection.remote == "[::1]:2049" and result.skipped_line_numbers == (3,)


def sock(remote: str, port: int, inode: int, state: str = "ESTABLISHED") -> TcpSocket:
    return TcpSocket("10.0.0.5", 40000 + inode, remote, port, state, inode)


def test_who_is_a_userspace_client():
    sockets = [sock("10.0.9.9", 2049, 1), sock("127.0.0.1", 20050, 2), sock("10.0.9.9", 2049, 3),
               sock("10.0.9.9", 2049, 0), sock("10.0.9.9", 2049, 5, state="TIME_WAIT"), sock("10.0.9.9", 443, 6),
               sock("10.0.9.9", 2049, 7)]
    owners = {1: SocketOwner(11, "nfs-cat", "pod-a", "c1"), 2: SocketOwner(12, "go-app", "pod-b"),
              3: SocketOwner(13, "stunnel5", "pod-efs-node"),  # efs-utils' tunnel: the kernel's own traffic
              5: SocketOwner(15, "nfs-cp", "pod-a"), 6: SocketOwner(16, "curl", "pod-a"),
              7: SocketOwner(17, "nfs-ls", None)}  # no pod: the node's own business
    clients = userspace_clients(sockets, owners)
    assert clients == [UserspaceClient(11, "nfs-cat", "pod-a", "c1", "10.0.9.9:2049"),
                       UserspaceClient(12, "go-app", "pod-b", None, "127.0.0.1:20050")]
    assert not clients[0].through_tunnel and clients[1].through_tunnel
    finding = clients[1].finding()
    assert finding.reason == "UserspaceNFSClient" and "an EFS TLS tunnel at 127.0.0.1:20050" in finding.message
    assert finding.remedy and finding.evidence == {"pid": "12", "command": "go-app", "remote": "127.0.0.1:20050"}


def test_the_kernels_own_transports_hold_no_inode_and_a_listener_is_no_connection():
    assert not is_nfs_endpoint(sock("10.0.9.9", 2049, 0, state="LISTEN"))
    assert userspace_clients([sock("10.0.9.9", 2049, 0)], {0: SocketOwner(1, "x", "pod")}) == []


# A stand-in for efs-utils' tunnel, as the real /proc shows it: a process named efs-proxy that listens on a
# loopback port (the mount's port=) and holds the connection to the "mount target" on port 2049.
TUNNEL = """
import ctypes, socket, sys
ctypes.CDLL(None).prctl(15, b"efs-proxy", 0, 0, 0)  # PR_SET_NAME: /proc/<pid>/comm
listener = socket.create_server(("127.0.0.1", 0))
upstream = socket.create_connection(("127.0.0.2", 2049))
print(listener.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_a_tunnels_port_and_its_server_are_read_from_the_real_proc():
    with socket.create_server(("127.0.0.2", 2049)) as target:
        tunnel = subprocess.Popen([sys.executable, "-c", TUNNEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        try:
            port = int(tunnel.stdout.readline())
            accepted, _ = target.accept()
            found = scan_nfs_sockets(ProcRoot("/proc"))
            accepted.close()
        finally:
            tunnel.stdin.close()
            tunnel.wait(timeout=30)
    assert [(t.local_port, t.remote_address, t.pid, t.command) for t in found.tunnels] == [
        (port, "127.0.0.2", tunnel.pid, "efs-proxy")]
    # The tunnel carries the kernel's traffic: it is no userspace client, and neither is this test's server.
    assert not [client for client in found.clients if client.pid == tunnel.pid]
