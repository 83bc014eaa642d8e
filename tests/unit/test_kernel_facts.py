"""The measured kernel facts that `options presets` and the docs quote: current, and agreeing with the code.

The file is written by `make kernel-facts` (the kernel lab); the kernel tests measure the same
things live on every `make test`. These checks need no VM: they catch a preset or a prediction
changed without measuring again.
"""

from pathlib import Path

import pytest

from mountwarden.core.options.kernelfacts import facts, preset_measurement
from mountwarden.core.options.normalize import kernel_io_size, normalize
from mountwarden.core.options.presets import DEPRECATED, EFS_PROVISIONER, PRESETS, CachePolicy
from mountwarden.core.options.table import BY_NAME
from mountwarden.core.policy import resolve_policy


@pytest.mark.parametrize("preset", [str(name) for name in PRESETS])
def test_every_preset_was_measured_with_its_current_options(preset):
    options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset).mount_options)
    assert preset_measurement(preset, options) is not None, (
        f"kernel_facts.json has no measurement of {preset} as {options}: run `make kernel-facts`")


@pytest.mark.parametrize("outcome", facts()["io_sizes"], ids=lambda o: str(o["asked"]))
def test_the_io_size_prediction_matches_the_measurement(outcome):
    assert kernel_io_size(outcome["asked"], outcome["server_max"]) == outcome["rsize"] == outcome["wsize"]


def test_the_options_said_to_be_inherited_through_a_shared_superblock_are_the_measured_ones():
    shared = {normalize(case["first"]).canonical.split(",")[-1].split("=")[0].removeprefix("no")
              for case in facts()["superblock_sharing"] if case["shared"]}
    for name in ("timeo", "retrans", "resvport", "nconnect"):
        assert name in shared
        assert "first one's" in BY_NAME[name].consequence or "first mount" in BY_NAME[name].consequence
    for case in facts()["superblock_sharing"]:
        if case["first"].startswith(("ro", "sync", "rsize", "acregmax", "lookupcache", "nocto", "soft")):  # v4.1
            assert not case["shared"], case


def test_nolock_is_local_only_on_nfsv3():
    granted = {(o["version"], o["options"]): o["second_client_granted"] for o in facts()["locking"]}
    assert granted[("3", "nolock")] is True
    assert granted[("4.1", "nolock")] is False
    assert "NFSv4 the kernel ignores nolock" in BY_NAME["lock"].consequence


def test_the_staging_preset_measured_never_stale():
    # The promise made for shared staging directories, as the kernel lab measured it.
    options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy="staging").mount_options)
    measured = preset_measurement("staging", options)
    assert measured.stat_staleness_seconds == 0.0 and measured.open_staleness_seconds == 0.0
    assert measured.new_file_by_stat_seconds is not None and measured.new_file_by_stat_seconds < 1.0
    assert measured.rpcs_per_stat <= 1.2  # one GETATTR per stat(), a few LOOKUP/ACCESS for the whole loop


@pytest.mark.parametrize("preset", [str(name) for name in PRESETS])
def test_each_promise_of_new_files_agrees_with_the_measurement(preset):
    options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset).mount_options)
    measured = preset_measurement(preset, options)
    text = PRESETS[CachePolicy(preset)].promise.new_files
    assert measured.negative_lookups_measured
    if text.startswith("Seen at once"):
        assert measured.new_file_by_stat_seconds is not None and measured.new_file_by_stat_seconds < 1.0
        assert measured.new_file_by_open_seconds is not None and measured.new_file_by_open_seconds < 1.0
    else:  # "Up to 10 minutes": still missing when the run ended
        assert measured.new_file_by_stat_seconds is None and measured.new_file_by_open_seconds is None


@pytest.mark.parametrize("preset", [str(name) for name in PRESETS])
def test_each_promise_of_stat_staleness_agrees_with_the_measurement(preset):
    options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset).mount_options)
    measured = preset_measurement(preset, options)
    never = PRESETS[CachePolicy(preset)].promise.stat_by_path.startswith("Never stale")
    assert (measured.stat_staleness_seconds == 0.0) is never
    assert measured.open_staleness_seconds == 0.0  # close-to-open, on NFSv4 even with nocto


def test_the_deprecated_presets_were_measured_as_they_were():
    for name, deprecation in DEPRECATED.items():
        former = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=None,
                                         mount_options=deprecation.former_options).mount_options)
        measured = preset_measurement(str(name), former, former=True)
        assert measured is not None, f"kernel_facts.json has no former_presets.{name}: run `make kernel-facts`"
    coherent = preset_measurement("coherent", ",".join(resolve_policy(
        provisioner=EFS_PROVISIONER, cache_policy=None,
        mount_options=DEPRECATED[CachePolicy.COHERENT].former_options).mount_options), former=True)
    # "left stat() by path up to 3 s stale": acregmin=acregmax=3, the upload incident's window.
    assert 1.0 <= coherent.stat_staleness_seconds <= 3.5


def test_what_a_shared_superblock_explains_is_what_was_measured():
    from mountwarden.core.options.compare import INHERITED_THROUGH_SUPERBLOCK, SEPARATE_SUPERBLOCK

    def option_of(case):
        last = case["first"].split(",")[-1]
        name = next(iter(normalize(last).options), last.split("=")[0])
        return {"soft": "hard", "softerr": "hard"}.get(name, name)

    cases = [case for case in facts()["superblock_sharing"] if not case["first"].startswith("vers=")]
    shared = {option_of(case) for case in cases if case["shared"]}
    separate = {option_of(case) for case in cases if not case["shared"]}
    assert set(INHERITED_THROUGH_SUPERBLOCK) <= shared
    measured_separately = {"sync", "acregmax", "acregmin", "lookupcache", "cto", "hard", "ro", "rsize"}
    assert measured_separately <= separate
    on_v3 = {option_of(case) for case in facts()["superblock_sharing"]
             if case["first"].startswith("vers=3") and not case["shared"]}
    assert on_v3 == {"lock", "local_lock"}  # NFSv3 compares them; NFSv4 ignores them (shared above)
    assert {name for name in SEPARATE_SUPERBLOCK if name not in ("acdirmin", "acdirmax")} <= separate | on_v3


def test_the_readme_presets_table_shows_the_options_and_staleness_the_lab_measured():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = {cells[0].strip("`"): cells for line in readme.splitlines() if line.startswith("| `")
            for cells in [[cell.strip() for cell in line.strip("|").split("|")]]}
    assert [name for name in rows if name in PRESETS] == [str(name) for name in PRESETS]
    for preset in PRESETS.values():
        _, options, stat_by_path, new_files, *_ = rows[str(preset.name)]
        assert options == f"`{','.join(preset.options)}`", preset.name
        efs_options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset.name).mount_options)
        measured = preset_measurement(str(preset.name), efs_options)
        assert stat_by_path.startswith("never stale (0 s)") is (measured.stat_staleness_seconds == 0.0), preset.name
        assert (new_files == "seen at once") is (measured.new_file_by_stat_seconds is not None), preset.name
