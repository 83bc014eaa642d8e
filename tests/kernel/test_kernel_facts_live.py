"""kernel_facts.json against the live kernel, on every `make test`.

The facts the docs, the presets and `options presets` quote were measured by `make kernel-facts`.
Here the kernel gives them again, measured in the session's lab VM in one round trip (the
`measured` fixture: the release, the server's maximum I/O size and its delegations, the
representative pairs of the sharing table in LIVE_SHARING_CASES, nconnect, rsize/wsize, what each
preset prints and the locks), and they must equal the recorded ones exactly: a stale or edited
file fails here. Timings and RPC counts are compared within stated tolerances where the presets
are measured (test_presets.py); the complete sharing table, measured by `make kernel-facts`, is
held to the code by tests/unit/test_kernel_facts.py.
"""

import copy

import pytest

from mountwarden.core.options.kernelfacts import facts
from mountwarden.lab.experiments import LIVE_SHARING_CASES
from mountwarden.lab.factscheck import EXACT_SECTIONS, exact_differences


def test_the_live_kernel_gives_exactly_the_recorded_facts(measured):
    assert exact_differences(facts(), measured.facts) == []


def test_every_deterministic_fact_was_measured_live(measured):
    assert set(EXACT_SECTIONS) <= set(measured.facts)
    assert [(c["first"], c["second"]) for c in measured.facts["superblock_sharing"]] == list(LIVE_SHARING_CASES)
    assert measured.facts["server"] == {"max_block_size": 1048576, "delegations": False}
    assert measured.facts["kernel"] == facts()["kernel"]
    print(f"deterministic facts measured live in {measured.seconds:.0f} s: {measured.sections}")


def _edit(document: dict, path: tuple, value) -> dict:
    edited = copy.deepcopy(document)
    target = edited
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return edited


#: One deliberate edit per section of the file: each must make the comparison fail, naming what differs.
EDITS = {
    "kernel": (("kernel",), "6.1.0-99-amd64"),
    "delegations": (("server", "delegations"), True),
    "superblock sharing": (("superblock_sharing", 0, "shared"), False),
    "inherited value": (("superblock_sharing", 0, "second_effective", 11), "timeo=600"),
    "nconnect": (("nconnect", "transports"), [2, 2, 2]),
    "io sizes": (("io_sizes", 0, "rsize"), 4096),
    "printed options": (("printed_options", "cached", "mountinfo", 0), "ro"),
    "locks": (("locking", 2, "second_client_granted"), False),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_deliberately_edited_fact_fails_the_comparison(measured, edit):
    path, value = EDITS[edit]
    recorded = facts()
    edited = _edit(recorded, path, value)
    assert edited != recorded, f"the edit of {path} changed nothing"
    differences = exact_differences(edited, measured.facts)
    assert len(differences) == 1, differences
    assert repr(value) in differences[0], differences
