"""The node simulator's kernel (tests/procsim.py) against what the kernel lab captured (kernel_facts.json).

Every pair of mounts the lab measured is replayed in the simulator: it must share a superblock
exactly when the kernel did, and print, for the second mount, exactly the mountstats and
mountinfo options the kernel printed (the run's addresses and ports aside). The same for the
presets' printed options, nconnect and rsize/wsize. tests/kernel/test_simulator_replay.py
does the same against the live kernel, with mounts coming and going.
"""

import pytest
from tests.procsim import MountRefused, NodeKernel

from mountwarden.core.options.kernelfacts import facts
from mountwarden.core.procfs.mountinfo import parse_mountinfo
from mountwarden.core.procfs.mountstats import parse_mountstats
from mountwarden.lab.experiments import EXPORT, SECOND_EXPORT, asked_options, stable_options

SERVER = "10.77.1.1"
MEASURED = [case for case in facts()["superblock_sharing"] if not case["refused"]]
REFUSED = [case for case in facts()["superblock_sharing"] if case["refused"]]


def lab_file_system(_server: str, path: str) -> str:
    """The lab's exports: tmpfs directories with an fsid each; a subdirectory is its export's file system."""
    return SECOND_EXPORT if path.startswith(SECOND_EXPORT) else EXPORT


def lab_kernel() -> NodeKernel:
    return NodeKernel(file_system_of=lab_file_system, highest_v4="4.2")


def printed(kernel: NodeKernel, point: str) -> tuple[list[str], list[str], list[str]]:
    """The mount's (mountstats options, mountinfo per-mount and super options, mountinfo super options)."""
    entry = next(m for m in parse_mountinfo(kernel.mountinfo()).mounts if m.mount_point == point)
    stats = next(d for d in parse_mountstats(kernel.mountstats()).devices if d.mount_point == point)

    def text(tokens):
        return [name if value is None else f"{name}={value}" for name, value in tokens]

    return (stable_options(text(stats.opts)), stable_options(text(entry.mount_option_tokens)
                                                             + text(entry.super_option_tokens)),
            stable_options(text(entry.super_option_tokens)))


def test_the_facts_hold_every_case_the_simulator_replays():
    assert len(MEASURED) >= 40, len(MEASURED)


@pytest.mark.parametrize("case", MEASURED, ids=lambda case: f"{case['first']}|{case['second']}")
def test_the_simulator_shares_and_prints_as_the_kernel_did(case):
    kernel = lab_kernel()
    first = kernel.mount(f"{SERVER}:{EXPORT}", asked_options(case["first"]), "/mnt/lab/a")
    second = kernel.mount(f"{SERVER}:{EXPORT}", asked_options(case["second"]), "/mnt/lab/b")
    assert (first.superblock is second.superblock) is case["shared"]
    effective, mountinfo, _ = printed(kernel, "/mnt/lab/b")
    assert effective == case["second_effective"]
    assert mountinfo == case["second_mountinfo"]


@pytest.mark.parametrize("preset", sorted(facts()["printed_options"]))
def test_the_simulator_prints_each_preset_as_the_kernel_did(preset):
    measured = facts()["printed_options"][preset]
    kernel = lab_kernel()
    kernel.mount(f"{SERVER}:{EXPORT}", f"{measured['asked']},nosharecache", "/mnt/lab/p")
    effective, _, super_options = printed(kernel, "/mnt/lab/p")
    assert effective == measured["mountstats"]
    assert super_options == measured["mountinfo"]


def test_nconnect_is_the_clients_first_mounts():
    measured = facts()["nconnect"]
    kernel = lab_kernel()
    points = []
    for index, value in enumerate(measured["asked"]):
        points.append(f"/mnt/lab/n{index}")
        export = (EXPORT, SECOND_EXPORT)[index % 2]
        kernel.mount(f"{SERVER}:{export}", f"vers=4.1,nconnect={value},nosharecache", points[-1])
    devices = {d.mount_point: d for d in parse_mountstats(kernel.mountstats()).devices}
    assert [devices[point].xprt_count for point in points] == measured["transports"]
    assert [int(dict(devices[point].opts)["nconnect"]) for point in points] == measured["printed"]


@pytest.mark.parametrize("outcome", facts()["io_sizes"], ids=lambda outcome: str(outcome["asked"]))
def test_rsize_and_wsize_are_what_the_kernel_made_of_them(outcome):
    kernel = NodeKernel(server_max=outcome["server_max"])
    size = outcome["asked"]
    kernel.mount(f"{SERVER}:{EXPORT}", f"vers=4.1,rsize={size},wsize={size}", "/mnt/lab/io")
    (device,) = [d for d in parse_mountstats(kernel.mountstats()).devices if d.mount_point == "/mnt/lab/io"]
    options = dict(device.opts)
    assert (int(options["rsize"]), int(options["wsize"])) == (outcome["rsize"], outcome["wsize"])


def test_a_superblock_lives_while_any_mount_holds_it():
    kernel = lab_kernel()
    kernel.mount(f"{SERVER}:{EXPORT}", "vers=4.1,timeo=100", "/mnt/a")
    held = kernel.mount(f"{SERVER}:{EXPORT}/sub", "vers=4.1,timeo=600", "/mnt/b")  # another path, same file system
    kernel.umount("/mnt/a")
    joined = kernel.mount(f"{SERVER}:{EXPORT}", "vers=4.1,timeo=600", "/mnt/c")
    assert joined.superblock is held.superblock and joined.superblock.held["timeo"] == 100
    kernel.umount("/mnt/b")
    kernel.umount("/mnt/c")
    fresh = kernel.mount(f"{SERVER}:{EXPORT}", "vers=4.1,timeo=600", "/mnt/d")
    assert fresh.superblock.held["timeo"] == 600 and kernel.clients == [fresh.superblock.client]


def test_another_file_system_of_the_same_client_gets_its_own_superblock_and_the_clients_connections():
    kernel = lab_kernel()
    one = kernel.mount(f"{SERVER}:{EXPORT}", "vers=4.1,nconnect=2", "/mnt/a")
    other = kernel.mount(f"{SERVER}:{SECOND_EXPORT}", "vers=4.1,nconnect=6", "/mnt/b")
    assert one.superblock is not other.superblock and one.superblock.client is other.superblock.client
    assert "nconnect=2" in kernel.mountstats_options(other.superblock)


def test_options_the_kernel_refuses_fail_the_mount():
    with pytest.raises(MountRefused, match="unknown option 'bogus'"):
        NodeKernel().mount(f"{SERVER}:{EXPORT}", "vers=4.1,bogus", "/mnt/a")
