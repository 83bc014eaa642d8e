"""The measured kernel facts that `options presets` and the docs quote: current, and agreeing with the code.

The file is written by `make kernel-facts` (the kernel lab); tests/kernel/test_kernel_facts_live.py
measures its deterministic facts again on every `make test` and compares. These checks need no
VM: they catch a preset, a prediction or a class of options changed without measuring again, and
hold the superblock comparison (superblock_key), the options a shared superblock explains and the
ones that give a superblock of its own to the complete measured table.
"""

from pathlib import Path

import pytest

from mountwarden.core.options.compare import SEPARATE_SUPERBLOCK
from mountwarden.core.options.kernelfacts import facts, preset_measurement
from mountwarden.core.options.normalize import (
    IGNORED_ON_NFS4,
    IGNORED_OPTIONS,
    INHERITED_THROUGH_SUPERBLOCK,
    PER_MOUNT_OPTIONS,
    kernel_io_size,
    normalize,
    superblock_key,
    with_kernel_defaults,
)
from mountwarden.core.options.presets import DEPRECATED, EFS_PROVISIONER, PRESETS, CachePolicy
from mountwarden.core.options.syntax import parse_option_tokens
from mountwarden.core.options.table import BY_NAME, OPTIONS, SPELLINGS, Origin, exclusive_group
from mountwarden.core.policy import resolve_policy
from mountwarden.lab.experiments import NOT_MEASURED, SHARING_CASES, asked_options


@pytest.mark.parametrize("preset", [str(name) for name in PRESETS])
def test_every_preset_was_measured_with_its_current_options(preset):
    options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset).mount_options)
    assert preset_measurement(preset, options) is not None, (
        f"kernel_facts.json has no measurement of {preset} as {options}: run `make kernel-facts`")


@pytest.mark.parametrize("outcome", facts()["io_sizes"], ids=lambda o: str(o["asked"]))
def test_the_io_size_prediction_matches_the_measurement(outcome):
    assert kernel_io_size(outcome["asked"], outcome["server_max"]) == outcome["rsize"] == outcome["wsize"]


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


MEASURED_PAIRS = [case for case in facts()["superblock_sharing"] if case["shared"] is not None]


def _options(side: str) -> dict:
    return with_kernel_defaults(normalize(asked_options(side)).options)


def _differing(case: dict) -> set[str]:
    """The canonical options the two sides of a case differ in (one flag of an exclusive group stands for it)."""
    first, second = _options(case["first"]), _options(case["second"])
    names = {name for name in first.keys() | second.keys() if first.get(name) != second.get(name)}
    return {(exclusive_group(name) or (name,))[0] for name in names}


def test_the_sharing_table_is_complete_for_the_options_the_kernel_sees():
    """Every option of the table that reaches the kernel is measured pair by pair, or NOT_MEASURED says why."""
    covered = {SPELLINGS[name].name for first, second in SHARING_CASES
               for name, _ in parse_option_tokens(f"{asked_options(first)},{asked_options(second)}")}
    reaching = {spec.name for spec in OPTIONS if spec.origin in (Origin.NFS, Origin.VFS, Origin.SECURITY)}
    assert reaching - covered == set(NOT_MEASURED), sorted((reaching - covered) ^ set(NOT_MEASURED))
    refused = {case["first"]: case["refused"] for case in facts()["superblock_sharing"] if case["shared"] is None}
    # Linux 6.1 knows no xprtsec (RPC-with-TLS came in 6.5) and mount.nfs refuses migration: both recorded as such.
    assert sorted(refused) == ["migration", "xprtsec=tls"], refused
    assert {case["first"] for case in facts()["superblock_sharing"]} == {first for first, _ in SHARING_CASES}, (
        "kernel_facts.json does not hold the cases of SHARING_CASES: run `make kernel-facts`")


@pytest.mark.parametrize("case", MEASURED_PAIRS, ids=lambda case: f"{case['first']}|{case['second']}")
def test_superblock_key_predicts_every_measured_pair(case):
    first, second = normalize(asked_options(case["first"])).options, normalize(asked_options(case["second"])).options
    assert (superblock_key(first) == superblock_key(second)) is case["shared"], _differing(case)


def test_each_class_of_options_is_the_measured_one():
    """Shared pairs: the second runs with the first's value (inherited), keeps its own flag (per mount) or neither
    prints it (ignored); every other pair gets a superblock of its own (separate)."""
    inherited, per_mount, ignored, separate = set(), set(), set(), set()
    for case in MEASURED_PAIRS:
        names = _differing(case)
        if not case["shared"]:
            separate |= names
            continue
        effective = with_kernel_defaults(normalize(case["second_effective"], observed=True).options)
        first = _options(case["first"])
        if names <= set(PER_MOUNT_OPTIONS):
            per_mount |= names
        elif all(name in effective and effective[name] == first.get(name) for name in names):
            inherited |= names
        else:
            ignored |= names
    assert inherited == set(INHERITED_THROUGH_SUPERBLOCK)
    assert per_mount == {(exclusive_group(name) or (name,))[0] for name in PER_MOUNT_OPTIONS}
    assert ignored == set(IGNORED_OPTIONS) | set(IGNORED_ON_NFS4)
    assert separate == set(SEPARATE_SUPERBLOCK)
    v3 = {name for case in MEASURED_PAIRS if case["first"].startswith("vers=3") and not case["shared"]
          for name in _differing(case)}
    assert set(IGNORED_ON_NFS4) <= v3  # ignored on NFSv4, compared on NFSv3


def test_options_said_to_be_taken_from_a_shared_superblock_say_so():
    assert INHERITED_THROUGH_SUPERBLOCK
    for name in INHERITED_THROUGH_SUPERBLOCK:
        assert "first one's" in BY_NAME[name].consequence or "first mount" in BY_NAME[name].consequence, name


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
