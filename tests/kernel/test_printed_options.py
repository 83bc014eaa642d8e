"""What mountinfo leaves out, what mountstats prints, and what the agent makes of both.

For each preset as a profile on EFS would mount it, the agent's effective options (its real
scan of the VM's live /proc, through `mountwarden agent --once --dry-run`) must carry every
option mountstats prints, with the same value.
"""

import json

import pytest

from mountwarden.core.options.normalize import normalize
from mountwarden.core.options.presets import PRESETS
from mountwarden.lab.experiments import preset_mount_options
from mountwarden.lab.livescan import mount_point as try_mount_point

PRESET_NAMES = [str(name) for name in PRESETS]


@pytest.fixture(scope="module")
def printed(measured):
    """What mountinfo and mountstats print for each preset as a profile on EFS mounts it (the session's measurement)."""
    found = measured.facts["printed_options"]
    assert sorted(found) == sorted(PRESET_NAMES)
    assert all(found[name]["asked"] == preset_mount_options(name) for name in PRESET_NAMES)
    return found


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_mountinfo_leaves_out_the_attribute_cache_times_at_their_defaults(printed, preset):
    mountinfo = normalize(printed[preset]["mountinfo"], observed=True).options
    mountstats = normalize(printed[preset]["mountstats"], observed=True).options
    for name in ("acregmin", "acregmax", "acdirmin", "acdirmax"):
        assert name in mountstats  # mountstats always prints them
        defaults = {"acregmin": 3, "acregmax": 60, "acdirmin": 30, "acdirmax": 60}
        assert (name in mountinfo) == (mountstats[name] != defaults[name]), (name, printed[preset])


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_neither_prints_options_at_their_defaults(printed, preset):
    for where in (printed[preset]["mountinfo"], printed[preset]["mountstats"]):
        options = normalize(where, observed=True).options
        assert "cto" not in options or options["cto"] is False  # nocto is printed, cto never
        assert options.get("lookupcache") != "all"  # lookupcache=all is the default: never printed


def test_the_agents_effective_options_equal_mountstats_on_every_mount(lab):
    client = lab.client()
    mounts = {try_mount_point(20 + index): preset_mount_options(name) for index, name in enumerate(PRESET_NAMES)}
    for point, options in mounts.items():
        lab.mount(f"{options},nosharecache", client, at=point)
    report = lab.vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc").json()
    volumes = {volume["mountPoint"]: volume for volume in report["spec"]["volumes"]}
    assert set(mounts) <= set(volumes), sorted(volumes)
    for point in mounts:
        effective = normalize(volumes[point]["effectiveOptions"], observed=True).options
        printed_by_kernel = normalize(lab.mountstats_options(point), observed=True).options
        assert volumes[point]["optionsSource"] == "mountstats"
        differing = {name: (value, effective.get(name)) for name, value in printed_by_kernel.items()
                     if effective.get(name) != value}
        assert differing == {}, json.dumps(volumes[point], indent=1)
