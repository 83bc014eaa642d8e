"""What a process that is not root can learn of a node's NFS mounts, on the real kernel: the facts an agent
without root rests on (docs/security.md, "An agent that is not root").

Laid out as on a node, in the session's lab VM: the kubelet's directory shared (the kubelet makes its root
rshared), a pod's directory 0750 root's as the kubelet makes it, and the agent's container a mount namespace
made *before* the pod's volume was mounted, a slave of the host's (``mountPropagation: HostToContainer``).
Then, as uid 65534 with no capability:

1. its own ``/proc/self/mountinfo`` and ``/proc/self/mountstats`` hold the pod's NFS mount, propagated in,
   with the host's superblock, options and counters: the agent's mount table and statistics need no root;
2. the host's ``/proc/1/mountstats`` is refused (the reason the agent is root today), and so is a
   ``statvfs()`` of the pod's volume (the kubelet's 0750 directory): the statvfs() probe needs root;
3. the RPC NULL call (``mountwarden ping-server``) from an unprivileged port gets knfsd's answer, in the
   client's network namespace and through an efs-utils-like TLS tunnel on 127.0.0.1; a tunnel that holds
   the connection and forwards nothing ends the call at its timeout, and one that is gone refuses it at once.
"""

import json
import shlex
from collections.abc import Iterator

import pytest
from tests.kernel.conftest import start_tunnel, tunnel_listening
from tests.support import wait_for

from mountwarden.core.procfs.mountinfo import parse_mountinfo
from mountwarden.core.procfs.mountstats import parse_mountstats
from mountwarden.lab.experiments import EFS_LIKE, Lab
from mountwarden.lab.vm import GUEST_PYTHON_ENV, GuestResult

KUBELET = "/var/lib/kubelet-unprivileged"
POD_UID = "0a1b0000-7a11-4000-8000-0000000000c1"
VOLUME = f"{KUBELET}/pods/{POD_UID}/volumes/kubernetes.io~nfs/data"
TUNNEL_PORT = 20061
#: uid and gid 65534, no supplementary group, no capability, and none to gain.
NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --no-new-privs"


class Node:
    def __init__(self, lab: Lab, agent_pid: int, client) -> None:
        self.lab, self.vm, self.agent_pid, self.client = lab, lab.vm, agent_pid, client

    def as_agent(self, command: str, *, check: bool = False) -> GuestResult:
        """``command`` as uid 65534 in the agent's mount namespace."""
        return self.vm.run(f"nsenter -t {self.agent_pid} -m {NOBODY} {command}", check=check)

    def ping(self, address: str, *args: str, network: str | None = None) -> dict:
        """``mountwarden ping-server`` as uid 65534, in ``network`` (a client's namespace) or the VM's."""
        enter = f"nsenter --net=/run/netns/{network} " if network else ""
        result = self.vm.run(f"{enter}{NOBODY} python3 -m mountwarden ping-server {address} --json "
                             f"{' '.join(args)}", env=GUEST_PYTHON_ENV, check=False, timeout=60)
        assert result.rc in (0, 1), result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def node(lab: Lab) -> Iterator[Node]:
    vm = lab.vm
    vm.run(f"mkdir -p {KUBELET} && mount -t tmpfs kubelet {KUBELET} && mount --make-rshared {KUBELET}")
    agent_pid = int(vm.run("unshare --mount --propagation slave sleep 3600 >/dev/null 2>&1 & echo $!").stdout)
    client = lab.client()
    try:
        vm.run(f"mkdir -p {VOLUME} && chmod 0750 {KUBELET}/pods/{POD_UID}")
        lab.mount(EFS_LIKE, client, at=VOLUME)  # in the host's mount namespace, as the kubelet mounts
        yield Node(lab, agent_pid, client)
    finally:
        vm.run(f"kill {agent_pid}; umount -l {VOLUME}; umount -l {KUBELET}", check=False)


def test_the_agents_own_mount_table_holds_the_pods_volume_propagated_in_after_it_started(node):
    host = next(e for e in parse_mountinfo(node.vm.read_text("/proc/1/mountinfo")).mounts if e.mount_point == VOLUME)
    read = node.as_agent("cat /proc/self/mountinfo", check=True)
    (seen,) = [e for e in parse_mountinfo(read.stdout).mounts if e.mount_point == VOLUME]
    assert (seen.major_minor, seen.fstype, seen.source) == (host.major_minor, host.fstype, host.source)
    assert seen.super_option_tokens == host.super_option_tokens
    assert any(field.startswith("master:") for field in seen.optional_fields), seen.optional_fields


def test_the_agents_own_mountstats_give_the_superblocks_options_and_counters_without_root(node):
    # Lookups of names that do not exist, from the host; then both readings in one go (nothing runs between).
    node.vm.run(" ; ".join(f"stat {VOLUME}/absent-{n}" for n in range(5)), check=False)
    both = node.vm.run(f"cat /proc/1/mountstats; echo ==AGENT==; nsenter -t {node.agent_pid} -m {NOBODY} "
                       "cat /proc/self/mountstats").stdout
    host_text, agent_text = both.split("==AGENT==\n")
    host = next(d for d in parse_mountstats(host_text).devices if d.mount_point == VOLUME)
    (seen,) = [d for d in parse_mountstats(agent_text).devices if d.mount_point == VOLUME]
    assert seen.opts == host.opts and seen.xprt_count == host.xprt_count
    lookups = {"host": host.operations["LOOKUP"].ops, "agent": seen.operations["LOOKUP"].ops}
    assert lookups["agent"] == lookups["host"] >= 5, lookups


def test_the_hosts_mountstats_and_a_statvfs_of_the_pods_volume_are_refused_to_it(node):
    hosts = node.as_agent("cat /proc/1/mountstats")
    assert hosts.rc != 0 and "Permission denied" in hosts.stderr, hosts
    probe = node.as_agent(f"stat -f {shlex.quote(VOLUME)}")
    assert probe.rc != 0 and "Permission denied" in probe.stderr, probe
    assert node.vm.run(f"stat -f -c %T {shlex.quote(VOLUME)}").stdout.strip() == "nfs"  # root gets through


def test_an_unprivileged_null_call_gets_the_servers_answer_in_the_clients_network(node):
    answered = node.ping(node.client.server, network=node.client.namespace)
    assert (answered["answered"], answered["verdict"], answered["error"]) == (True, "answered", None), answered
    v3 = node.ping(node.client.server, "--version", "3", network=node.client.namespace)
    assert v3["answered"] is True, v3
    v2 = node.ping(node.client.server, "--version", "2", network=node.client.namespace)
    # knfsd serves 3 and 4 here: it names the range it serves.
    assert (v2["answered"], v2["verdict"]) == (False, "version not served"), v2
    assert v2["versions"][0] <= 3 and v2["versions"][1] == 4, v2


def test_a_null_call_through_a_tunnel_is_answered_timed_out_when_it_forwards_nothing_refused_when_gone(node):
    vm = node.vm
    pid = start_tunnel(vm, TUNNEL_PORT)
    try:
        up = node.ping("127.0.0.1", "--port", str(TUNNEL_PORT))
        assert up["answered"] is True, up
        vm.run(f"kill -STOP {pid}")  # holds its connections and forwards nothing: a server that does not answer
        held = node.ping("127.0.0.1", "--port", str(TUNNEL_PORT), "--timeout", "2")
        assert (held["answered"], held["verdict"], held["error"]) == (False, None, "timed out"), held
        assert held["seconds"] >= 2, held
        vm.run(f"kill -KILL {pid}")
        wait_for(lambda: not tunnel_listening(vm, TUNNEL_PORT), timeout=30, what="the listener gone with its process")
        gone = node.ping("127.0.0.1", "--port", str(TUNNEL_PORT))
        assert gone["answered"] is False and "refused" in gone["error"], gone
    finally:
        vm.run(f"kill -KILL {pid}", check=False)
