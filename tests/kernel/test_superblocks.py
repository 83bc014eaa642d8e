"""Which option differences share a superblock, and what a later mount silently runs with.

Each case mounts the same export twice through one fresh NFS client (a network namespace of
its own), the second mount differing from the first in one option, and reads both back from
the VM's /proc. The finding the agent makes on the live /proc must name exactly the mount
that shares a superblock and inherited another mount's value.
"""

import json

import pytest

from mountwarden.core.options.normalize import normalize
from mountwarden.lab.experiments import SHARING_CASES, measure_superblock_sharing
from mountwarden.lab.livescan import mount_point as try_mount_point
from mountwarden.lab.vm import GUEST_PYTHON_ENV

#: Options the kernel does not compare: a later mount that differs only in them shares the superblock.
INHERITED = {"timeo=100", "retrans=2", "noresvport", "nconnect=4"}
#: NFSv4 ignores nolock and local_lock, so the two mounts are identical to the kernel.
IGNORED_ON_V4 = {"nolock", "local_lock=all"}
#: Per-mount flags: the mounts share the superblock, each keeps its own flag.
PER_MOUNT = {"noatime", "nosuid"}


@pytest.fixture(scope="module")
def sharing(lab):
    return {outcome.first: outcome for outcome in measure_superblock_sharing(lab)}


def test_every_case_was_measured(sharing):
    assert set(sharing) == {first for first, _ in SHARING_CASES}


@pytest.mark.parametrize(("first", "second"), SHARING_CASES)
def test_which_differences_share_a_superblock(sharing, first, second):
    shared = first in INHERITED | IGNORED_ON_V4 | PER_MOUNT
    assert sharing[first].shared is shared, sharing[first]


@pytest.mark.parametrize("first", sorted(INHERITED))
def test_a_later_mount_silently_runs_with_the_first_mounts_value(sharing, first):
    outcome = sharing[first]
    effective = normalize(outcome.second_effective, observed=True).options
    name, value = next(iter(normalize(first).options.items()))
    asked = normalize(outcome.second).options.get(name)
    assert effective.get(name) == value, outcome
    assert asked != value


@pytest.mark.parametrize("first", sorted(PER_MOUNT))
def test_per_mount_flags_stay_with_each_mount(sharing, first):
    # mountinfo's per-mount options (noatime, nosuid) belong to the mount, not the superblock.
    assert first not in sharing[first].second_mountinfo


def test_the_agents_finding_names_the_sharing_mounts_and_nothing_else(lab):
    """Three pod volumes: two share a superblock (timeo differs), the third has its own (acregmax differs)."""
    client = lab.client()
    asked = {0: "vers=4.1,timeo=100", 1: "vers=4.1,timeo=600", 2: "vers=4.1,acregmax=7"}
    for index, options in asked.items():
        lab.mount(options, client, at=try_mount_point(index))
    scan = lab.vm.run(["python3", "-m", "mountwarden.lab.livescan"], env=GUEST_PYTHON_ENV, timeout=300,
                      input=json.dumps({try_mount_point(i): o for i, o in asked.items()})).json()["mounts"]
    reasons = {index: {f["reason"] for f in scan[try_mount_point(index)]["findings"]} for index in asked}
    assert reasons[0] == set()  # the first mount made the superblock: it has what it asked for
    assert reasons[1] == {"OptionMismatch", "SuperblockShared"}
    assert reasons[2] == set()
    shared = next(f for f in scan[try_mount_point(1)]["findings"] if f["reason"] == "SuperblockShared")
    assert shared["other_mounts"] == [try_mount_point(0)]
    mismatch = next(f for f in scan[try_mount_point(1)]["findings"] if f["reason"] == "OptionMismatch")
    assert (mismatch["option"], mismatch["expected"], mismatch["actual"]) == ("timeo", 600, 100)
