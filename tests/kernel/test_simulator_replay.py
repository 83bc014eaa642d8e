"""The node simulator (tests/procsim.py) against the kernel: the same mount sequences, the same /proc.

One NFS client (a network namespace, as one node has one) mounts and unmounts in the lab VM, in
the kubelet's layout, what a node sees as pods come and go: a superblock kept alive by a later
mount after its first mount left, a later mount joining it with other options, another path of
the same export sharing it, another export not, nconnect fixed by the client's first mount and a
fresh client once the last mount went, NFSv3's nolock and lock apart. After every step the VM's
/proc is read back; the simulator replays the same steps. The agent's own scan of both must find
the same superblocks (which mounts share one), the same effective options and connections, and
each mount's options must be printed the same in mountinfo and mountstats (the run's addresses
and ports aside).
"""

from collections import defaultdict

import pytest
from tests.procsim import NodeKernel

from mountwarden.core.node.scan import scan_node
from mountwarden.core.procfs.mountinfo import parse_mountinfo
from mountwarden.core.procfs.mountstats import parse_mountstats
from mountwarden.lab.experiments import EXPORT, SECOND_EXPORT, CapturedMount, Program, stable_options

POD = "0a1b0000-7a11-4000-8000-0000000e9a7e"
SUBDIRECTORY = f"{EXPORT}/replay"


def volume(name: str) -> str:
    return f"/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~nfs/{name}"


#: (step, what it shows): ("mount", name, export, options) or ("umount", name, ...).
STEPS = (
    (("mount", "a", EXPORT, "vers=4.1,timeo=100"), "a superblock"),
    (("mount", "b", SUBDIRECTORY, "vers=4.1,timeo=600"), "another path of the export shares it, with timeo=100"),
    (("mount", "c", SECOND_EXPORT, "vers=4.1,timeo=600"), "another export (fsid) has its own"),
    (("umount", "a"), "the first mount leaves: b keeps the superblock alive"),
    (("mount", "d", EXPORT, "vers=4.1,timeo=600"), "a later mount joins the superblock b holds: timeo=100"),
    (("umount", "b", "d"), "the last mounts of that superblock leave"),
    (("mount", "e", EXPORT, "vers=4.1,timeo=600"), "a fresh superblock: timeo=600"),
    (("mount", "f", EXPORT, "vers=4.1,acregmax=7"), "an option the kernel compares: a superblock of its own"),
    (("mount", "g", EXPORT, "vers=4.1,nconnect=4,timeo=300"), "nconnect and timeo are not compared: e's"),
    (("umount", "c", "e", "f", "g"), "the client's last mounts leave: the client goes"),
    (("mount", "h", SECOND_EXPORT, "vers=4.1,nconnect=2"), "a fresh client: nconnect=2"),
    (("mount", "i", EXPORT, "vers=4.1,nconnect=6,nosharecache"), "the client's first mount fixed nconnect"),
    (("mount", "j", EXPORT, "vers=3,nolock"), "NFSv3: another client"),
    (("mount", "k", EXPORT, "vers=3,lock"), "NFSv3 compares nolock: a superblock of its own"),
    (("mount", "l", SUBDIRECTORY, "vers=3,nolock"), "another path, the same options: j's"),
    (("umount", "h", "i", "j", "k", "l"), "all gone"),
)
NAMES = sorted({step[1] for step, _ in STEPS if step[0] == "mount"})


def lab_file_system(_server: str, path: str) -> str:
    """The lab's exports: tmpfs directories with an fsid each; a subdirectory is its export's file system."""
    return SECOND_EXPORT if path.startswith(SECOND_EXPORT) else EXPORT


@pytest.fixture(scope="module")
def replayed(lab):
    """Per step: the lab's mountinfo and mountstats text of the replay's mounts, and the simulator's."""
    lab.vm.run(f"mkdir -p {SUBDIRECTORY}")
    client = lab.client()
    program = Program(lab)
    captures = []
    for step, _ in STEPS:
        if step[0] == "mount":
            program.mount(client, step[3], export=step[2], at=volume(step[1]))
        else:
            program.umount(*(volume(name) for name in step[1:]))
            if step[1:] in (("c", "e", "f", "g"), ("h", "i", "j", "k", "l")):
                program.client_gone(client)  # the kernel frees a client with its last superblock
        captures.append(program.capture(*(volume(name) for name in NAMES)))
    results = program.run()
    refused = [result["error"] for result in results if result.get("mounted") is False]
    assert refused == [], refused

    kernel = NodeKernel(file_system_of=lab_file_system, highest_v4="4.2")
    steps = []
    for (step, what), captured in zip(STEPS, captures, strict=True):
        if step[0] == "mount":
            kernel.mount(f"{client.server}:{step[2]}", step[3], volume(step[1]))
        else:
            for name in step[1:]:
                kernel.umount(volume(name))
        mounts = [CapturedMount.from_result(volume(name), results[captured][volume(name)]) for name in NAMES]
        lab_text = ("\n".join(line for mount in mounts for line in mount.mountinfo) + "\n",
                    "\n".join(block for mount in mounts for block in mount.mountstats) + "\n")
        steps.append((step, what, lab_text, (kernel.mountinfo(), kernel.mountstats())))
    return steps


def view(mountinfo: str, mountstats: str) -> dict:
    """What the agent's scan makes of a /proc: the groups of mounts sharing a superblock, and each mount."""
    scan = scan_node(parse_mountinfo(mountinfo), parse_mountstats(mountstats), kubelet_roots=["/var/lib/kubelet"])
    groups = defaultdict(set)
    for found in scan.volumes:
        groups[found.superblock].add(found.volume_name)
    entries = {entry.mount_point: entry for entry in parse_mountinfo(mountinfo).mounts}
    devices = {device.mount_point: device for device in parse_mountstats(mountstats).devices}
    return {
        "superblocks": sorted(sorted(group) for group in groups.values()),
        "mounts": {found.volume_name: {
            "effective": stable_options(found.effective_options),
            "connections": found.connections,
            "mountinfo": [entry.fstype, entry.source.split(":", 1)[1], entry.mount_options,
                          *stable_options(entry.super_options.split(","))],
            "mountstats": stable_options(f"{name}={value}" if value is not None else name
                                         for name, value in devices[found.mount_point].opts),
        } for found in scan.volumes for entry in [entries[found.mount_point]]},
    }


@pytest.mark.parametrize("index", range(len(STEPS)), ids=[what for _, what in STEPS])
def test_the_simulator_gives_the_agent_what_the_kernel_gives_it(replayed, index):
    step, what, lab, simulated = replayed[index]
    expected, got = view(*lab), view(*simulated)
    assert got["superblocks"] == expected["superblocks"], (step, what)
    assert got["mounts"] == expected["mounts"], (step, what)


def test_the_sequence_showed_what_it_is_about(replayed):
    """The kernel's side of the replay, so that a change in the steps cannot make it vacuous."""
    by_step = {what: view(*lab) for _, what, lab, _ in replayed}
    kept_alive = by_step["a later mount joins the superblock b holds: timeo=100"]
    assert kept_alive["superblocks"] == [["b", "d"], ["c"]]
    assert "timeo=100" in kept_alive["mounts"]["d"]["effective"]
    assert "timeo=600" in by_step["a fresh superblock: timeo=600"]["mounts"]["e"]["effective"]
    assert by_step["the client's first mount fixed nconnect"]["mounts"]["i"]["connections"] == 2
    assert by_step["another path, the same options: j's"]["superblocks"] == [["h"], ["i"], ["j", "l"], ["k"]]
    assert by_step["all gone"]["mounts"] == {}
