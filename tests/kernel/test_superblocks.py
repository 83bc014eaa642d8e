"""Which option differences share a superblock, and what a later mount silently runs with, on the live kernel.

Each pair of LIVE_SHARING_CASES mounts the same export twice through one fresh NFS client, the
second mount differing from the first in one option (the session's `measured` fixture; `make
kernel-facts` measures the whole table). The comparison the code makes (superblock_key) must
predict each outcome, and a later mount sharing a superblock must run with the first mount's
value of what the kernel does not compare. The finding the agent makes on the live /proc must
name exactly the mount that shares a superblock and inherited another mount's value.
"""

import json

import pytest

from mountwarden.core.options.normalize import INHERITED_THROUGH_SUPERBLOCK, normalize, superblock_key
from mountwarden.lab.experiments import LIVE_SHARING_CASES, asked_options
from mountwarden.lab.livescan import mount_point as try_mount_point
from mountwarden.lab.vm import GUEST_PYTHON_ENV


@pytest.fixture(scope="module")
def sharing(measured):
    return {(case["first"], case["second"]): case for case in measured.facts["superblock_sharing"]}


@pytest.mark.parametrize(("first", "second"), LIVE_SHARING_CASES)
def test_the_code_predicts_which_differences_share_a_superblock(sharing, first, second):
    case = sharing[(first, second)]
    predicted = superblock_key(normalize(asked_options(first)).options) == superblock_key(
        normalize(asked_options(second)).options)
    assert case["shared"] is predicted, case


@pytest.mark.parametrize(("first", "second"), [(first, second) for first, second in LIVE_SHARING_CASES
                                               if next(iter(normalize(first).options)) in INHERITED_THROUGH_SUPERBLOCK])
def test_a_later_mount_silently_runs_with_the_first_mounts_value(sharing, first, second):
    case = sharing[(first, second)]
    effective = normalize(case["second_effective"], observed=True).options
    ((name, value),) = normalize(first).options.items()
    assert case["shared"] is True and effective.get(name) == value, case
    assert normalize(second).options.get(name) != value


def test_the_mounts_own_flags_stay_with_each_mount(sharing):
    # mountinfo's per-mount options (nosuid) belong to the mount, not the superblock.
    case = sharing[("nosuid", "suid")]
    assert case["shared"] is True and "nosuid" not in case["second_mountinfo"], case


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
