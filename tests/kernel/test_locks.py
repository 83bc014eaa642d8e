"""nolock and local_lock: local locks on NFSv3, ignored by the kernel on NFSv4.

Two independent clients mount the same export with the same options; the first takes an
exclusive POSIX lock and the second tries to. Where the second gets it, two writers can
corrupt a SQLite database.
"""

import pytest

from mountwarden.core.options.normalize import normalize


@pytest.fixture(scope="module")
def outcomes(measured):
    """LOCK_CASES (the session's measurement), by version and options."""
    return {(o["version"], o["options"]): o for o in measured.facts["locking"]}


def test_nolock_on_nfsv3_lets_a_second_client_take_the_same_lock(outcomes):
    assert outcomes[("3", "nolock")]["second_client_granted"] is True
    assert outcomes[("3", "nolock")]["effective_lock_options"] == ["nolock", "local_lock=all"]


@pytest.mark.parametrize("options", ["nolock", "local_lock=all", "lock"])
def test_nfsv4_ignores_nolock_and_local_lock(outcomes, options):
    outcome = outcomes[("4.1", options)]
    assert outcome["second_client_granted"] is False
    assert outcome["effective_lock_options"] == ["local_lock=none"], outcome


def test_the_option_core_says_so():
    warnings = [w.message for w in normalize("vers=4.1,nolock").warnings]
    assert any("NFSv4 ignores nolock" in message for message in warnings), warnings
    assert not [w for w in normalize("vers=3,nolock").warnings if "ignores" in w.message]
