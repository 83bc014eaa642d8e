"""The comparison of the facts file with a live measurement (mountwarden.lab.factscheck), on recorded facts.

The kernel tests run it against the live kernel; here its verdicts themselves are checked: the
file agrees with itself, an edited fact is named, and timings and RPC counts are judged within the
stated tolerances, never-stale and still-missing exactly.
"""

import copy

from mountwarden.core.options.kernelfacts import facts
from mountwarden.lab.factscheck import (
    RPC_TOLERANCE_CALLS,
    STALENESS_TOLERANCE_SECONDS,
    exact_differences,
    preset_differences,
    rpc_within_tolerance,
)

PRESETS = ["strict", "staging", "cached", "read-only"]


def test_the_recorded_facts_agree_with_themselves():
    assert exact_differences(facts(), facts()) == []
    assert preset_differences(facts()["presets"], facts()["presets"], PRESETS) == []


def test_an_edited_sharing_fact_is_named_with_both_values():
    live = copy.deepcopy(facts())
    live["superblock_sharing"][0]["shared"] = not live["superblock_sharing"][0]["shared"]
    (difference,) = exact_differences(facts(), live)
    first = live["superblock_sharing"][0]
    assert difference.startswith(f"superblock sharing ('{first['first']}', '{first['second']}'), shared:")


def test_a_pair_the_file_does_not_hold_says_to_measure_again():
    live = {"superblock_sharing": [{"first": "timeo=1", "second": "timeo=2", "shared": True}]}
    assert exact_differences(facts(), live) == [
        "superblock sharing ('timeo=1', 'timeo=2'): not in the facts file (run `make kernel-facts`)"]


def test_a_kernel_release_that_differs_fails():
    (difference,) = exact_differences(facts(), {"kernel": "6.1.0-99-amd64"})
    assert difference == f"kernel: the facts file says {facts()['kernel']!r}, the kernel '6.1.0-99-amd64'"


def test_timings_within_the_tolerance_pass_and_beyond_it_fail():
    recorded = facts()["presets"]
    live = copy.deepcopy(recorded)
    cached = live["cached"]["coherence"]["stat_by_path"]
    cached["worst_seconds"] = recorded["cached"]["coherence"]["stat_by_path"]["worst_seconds"] - 1.0
    assert preset_differences(recorded, live, ["cached"]) == []
    cached["worst_seconds"] -= STALENESS_TOLERANCE_SECONDS
    (difference,) = preset_differences(recorded, live, ["cached"])
    assert difference.startswith("cached staleness by stat_by_path:")


def test_never_stale_and_still_missing_are_exact():
    recorded = facts()["presets"]
    live = copy.deepcopy(recorded)
    live["staging"]["coherence"]["stat_by_path"]["worst_seconds"] = 0.1
    live["cached"]["negative_lookups"]["stat_by_path"]["found_after_seconds"] = 7.9
    assert len(preset_differences(recorded, live, ["staging", "cached"])) == 2


def test_rpc_counts_are_judged_by_calls_or_share_whichever_is_larger():
    assert rpc_within_tolerance(5, 5 + RPC_TOLERANCE_CALLS) and not rpc_within_tolerance(5, 6 + RPC_TOLERANCE_CALLS)
    assert rpc_within_tolerance(250, 275) and not rpc_within_tolerance(250, 276)
