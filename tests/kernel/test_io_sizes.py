"""rsize/wsize: what the kernel makes of odd sizes, and what the option core predicts and says."""

import pytest

from mountwarden.core.options.normalize import kernel_io_size, normalize
from mountwarden.lab.experiments import IO_SIZES


@pytest.fixture(scope="module")
def outcomes(measured):
    """Each size of IO_SIZES asked for rsize and wsize (the session's measurement)."""
    return {outcome["asked"]: outcome for outcome in measured.facts["io_sizes"]}


@pytest.mark.parametrize("asked", IO_SIZES)
def test_the_option_core_predicts_what_the_kernel_did(outcomes, asked):
    outcome = outcomes[asked]
    assert outcome["server_max"] == 1048576
    assert outcome["rsize"] == outcome["wsize"] == kernel_io_size(asked, outcome["server_max"]), outcome


@pytest.mark.parametrize("asked", IO_SIZES)
def test_the_message_names_the_value_the_kernel_used(outcomes, asked):
    used = outcomes[asked]["wsize"]
    warnings = [w.message for w in normalize(f"wsize={asked}").warnings]
    if used == asked:
        assert warnings == []
    else:
        assert len(warnings) == 1 and f"the kernel uses wsize={used}" in warnings[0], warnings


def test_504_kib_is_kept(outcomes):
    # The chunk size of a client benchmark on EFS: a whole number of pages, so the kernel keeps it.
    assert outcomes[516096]["wsize"] == 516096
