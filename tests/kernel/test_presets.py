"""Each preset's cost and staleness, measured on the real client, as a profile on EFS mounts it.

Cost: the RPCs of a paced stat() loop, `ls -l` of 50 files and a paced open()/close() loop.
Staleness: the upload-service race, a writer on another client appending and closing every
0.25 s while one reader stat()s the path and another open()s and fstat()s (the server grants
no delegations, as EFS grants none). The figures quoted by `options presets` and the docs come
from `make kernel-facts`, which runs the same experiments; the last tests compare them with these,
within the tolerances of mountwarden.lab.factscheck.
"""

import pytest

from mountwarden.core.options.kernelfacts import facts
from mountwarden.lab.experiments import (
    COHERENCE_SECONDS,
    former_preset_mount_options,
    measure_coherence,
    measure_cost,
    measure_negative_lookups,
    preset_mount_options,
)
from mountwarden.lab.factscheck import preset_differences

#: Measuring under TCG on a loaded machine: the session VM's boot counts against the first test too.
pytestmark = pytest.mark.timeout(1800)

PRESETS = ("strict", "staging", "cached", "read-only")


# Three fixtures, so that no one test's set-up (within the per-test timeout) measures everything under TCG.
@pytest.fixture(scope="module")
def per_preset(lab):
    """Each preset's cost and staleness, as a profile on EFS mounts it."""
    results = {}
    for preset in PRESETS:
        options = preset_mount_options(preset)
        results[preset] = {"cost": measure_cost(lab, options), "coherence": measure_coherence(lab, options)}
    return results


@pytest.fixture(scope="module")
def former(lab):
    options = former_preset_mount_options("coherent")
    return {"coherent (former)": {"coherence": measure_coherence(lab, options), "cost": measure_cost(lab, options),
                                  "negative_lookups": measure_negative_lookups(lab, options)}}


@pytest.fixture(scope="module")
def negative(lab):
    return {preset: measure_negative_lookups(lab, preset_mount_options(preset)) for preset in PRESETS}


def found_after(negative, preset, reader):
    return negative[preset][reader]["found_after_seconds"]


def worst(results, preset, reader):
    return results[preset]["coherence"][reader]["worst_seconds"]


def test_strict_is_never_stale_and_pays_a_round_trip_per_path_component(per_preset):
    assert worst(per_preset, "strict", "stat_by_path") == 0.0
    assert worst(per_preset, "strict", "open_fstat") == 0.0
    stat_loop = per_preset["strict"]["cost"]["stat_loop"]
    calls = per_preset["strict"]["cost"]["paced_calls"]
    # lookupcache=none and actimeo=0: every stat() revalidates each component of the path.
    assert stat_loop["GETATTR"] >= calls and stat_loop["LOOKUP"] >= calls, stat_loop


def test_staging_is_never_stale_for_one_getattr_per_stat(per_preset):
    # The preset for the upload service's staging directory: what it promises, measured.
    assert worst(per_preset, "staging", "stat_by_path") == 0.0
    assert worst(per_preset, "staging", "open_fstat") == 0.0
    stat_loop = per_preset["staging"]["cost"]["stat_loop"]
    calls = per_preset["staging"]["cost"]["paced_calls"]
    assert calls <= stat_loop.get("GETATTR", 0) <= calls + 2 and stat_loop.get("LOOKUP", 0) <= 2, stat_loop


def test_staging_and_strict_see_a_new_file_at_once_after_a_failed_lookup(negative):
    assert set(negative) == set(PRESETS)
    for preset in ("staging", "strict"):
        for reader in ("stat_by_path", "open_by_path"):
            seen = found_after(negative, preset, reader)
            assert seen is not None and seen < 1.0, (preset, reader, negative[preset])


def test_cached_and_read_only_keep_a_failed_lookup_for_the_whole_run(negative):
    # lookupcache=all with acdirmax=600: the name stays missing for as long as we look.
    for preset in ("cached", "read-only"):
        assert found_after(negative, preset, "stat_by_path") is None, negative[preset]
        assert found_after(negative, preset, "open_by_path") is None, negative[preset]


def test_the_former_coherent_kept_stat_by_path_stale_for_seconds(former):
    # acregmin=acregmax=3: the window in which the upload service read a cached size (the incident).
    assert 1.0 <= worst(former, "coherent (former)", "stat_by_path") <= 3.0 + 1.5
    # close-to-open: an open() after the writer's close() sees its size.
    assert worst(former, "coherent (former)", "open_fstat") == 0.0


def test_cached_keeps_stat_by_path_stale_for_the_whole_run_but_open_is_fresh(per_preset):
    assert worst(per_preset, "cached", "stat_by_path") >= COHERENCE_SECONDS / 2
    assert worst(per_preset, "cached", "open_fstat") == 0.0
    stat_loop = per_preset["cached"]["cost"]["stat_loop"]
    assert stat_loop.get("GETATTR", 0) <= 2, stat_loop


def test_nocto_does_not_make_open_stale_on_nfsv4_without_delegations(per_preset):
    # read-only is nocto, yet every open() is an OPEN round trip that brings fresh attributes back.
    assert worst(per_preset, "read-only", "open_fstat") == 0.0
    assert worst(per_preset, "read-only", "stat_by_path") >= COHERENCE_SECONDS / 2
    open_loop = per_preset["read-only"]["cost"]["open_close_loop"]
    assert open_loop["total"] >= per_preset["read-only"]["cost"]["paced_calls"], open_loop


def test_sync_on_the_writer_does_not_refresh_a_readers_cache(lab):
    # sync makes the writer wait for the server; the reader's attribute cache still decides what it sees.
    writer = lab.mount("vers=4.1,sync")
    stat_reader = lab.mount("vers=4.1,acregmin=3,acregmax=3")
    open_reader = lab.mount("vers=4.1,acregmin=3,acregmax=3")
    result = lab.workload("coherence", writer, stat_reader, open_reader, str(COHERENCE_SECONDS),
                          timeout=COHERENCE_SECONDS + 120)
    assert result["stat_by_path"]["worst_seconds"] >= 1.0, result


def test_the_recorded_costs_and_staleness_hold_live(per_preset, negative):
    """kernel_facts.json's figures per preset (quoted by `options presets` and the docs), measured again here."""
    recorded = facts()["presets"]
    assert all(recorded[preset]["options"] == preset_mount_options(preset) for preset in PRESETS), (
        "a preset's options changed since `make kernel-facts`")
    live = {preset: {**per_preset[preset], "negative_lookups": negative[preset]} for preset in PRESETS}
    assert preset_differences(recorded, live, PRESETS) == []


def test_the_former_coherents_recorded_costs_and_staleness_hold_live(former):
    recorded = facts()["former_presets"]
    assert recorded["coherent"]["options"] == former_preset_mount_options("coherent")
    assert preset_differences(recorded, {"coherent": former["coherent (former)"]}, ["coherent"]) == []
