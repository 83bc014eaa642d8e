"""The measured kernel facts that `options presets` and the docs quote: current, and agreeing with the code.

The file is written by `make kernel-facts` (the kernel lab); the kernel tests measure the same
things live on every `make test`. These checks need no VM: they catch a preset or a prediction
changed without measuring again.
"""

import pytest

from mountwarden.core.kernelfacts import facts, preset_measurement
from mountwarden.core.options import kernel_io_size, normalize
from mountwarden.core.optiontable import BY_NAME
from mountwarden.core.policy import resolve_policy
from mountwarden.core.presets import EFS_PROVISIONER, PRESETS


@pytest.mark.parametrize("preset", [str(name) for name in PRESETS])
def test_every_preset_was_measured_with_its_current_options(preset):
    options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset).mount_options)
    assert preset_measurement(preset, options) is not None, (
        f"kernel_facts.json has no measurement of {preset} as {options}: run `make kernel-facts`")


@pytest.mark.parametrize("outcome", facts()["io_sizes"], ids=lambda o: str(o["asked"]))
def test_the_io_size_prediction_matches_the_measurement(outcome):
    assert kernel_io_size(outcome["asked"], outcome["server_max"]) == outcome["rsize"] == outcome["wsize"]


def test_the_options_said_to_be_inherited_through_a_shared_superblock_are_the_measured_ones():
    shared = {normalize(case["first"]).canonical.split("=")[0].removeprefix("no")
              for case in facts()["superblock_sharing"] if case["shared"]}
    for name in ("timeo", "retrans", "resvport", "nconnect"):
        assert name in shared
        assert "first one's" in BY_NAME[name].consequence or "first mount" in BY_NAME[name].consequence
    for case in facts()["superblock_sharing"]:
        if case["first"].startswith(("ro", "sync", "rsize", "acregmax", "lookupcache", "nocto", "soft")):
            assert not case["shared"], case


def test_nolock_is_local_only_on_nfsv3():
    granted = {(o["version"], o["options"]): o["second_client_granted"] for o in facts()["locking"]}
    assert granted[("3", "nolock")] is True
    assert granted[("4.1", "nolock")] is False
    assert "NFSv4 the kernel ignores nolock" in BY_NAME["lock"].consequence
