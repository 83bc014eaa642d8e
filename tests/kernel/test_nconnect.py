"""nconnect on a real client: the first mount to a server decides the connections of all."""

import json

import pytest

from mountwarden.lab.livescan import mount_point as try_mount_point
from mountwarden.lab.vm import GUEST_PYTHON_ENV


@pytest.fixture(scope="module")
def outcome(measured):
    """One client mounting nconnect=4, 2 and 8 (the session's measurement, in mount order)."""
    found = measured.facts["nconnect"]
    assert found["asked"] == [4, 2, 8], found
    return found


def test_the_first_mount_sets_the_connections_of_every_later_mount(outcome):
    # One xprt: line per connection in mountstats, for every mount of the client.
    assert outcome["transports"] == [4, 4, 4], outcome


def test_mountstats_prints_the_clients_value_not_the_one_asked(outcome):
    assert outcome["printed"] == [4, 4, 4], outcome


def test_the_agent_reports_nconnect_ignored_on_the_later_mount(lab):
    client = lab.client()
    asked = {10: "vers=4.1,nconnect=2", 11: "vers=4.1,nconnect=6,nosharecache"}
    for index, options in asked.items():
        lab.mount(options, client, at=try_mount_point(index))
    scan = lab.vm.run(["python3", "-m", "mountwarden.lab.livescan"], env=GUEST_PYTHON_ENV, timeout=300,
                      input=json.dumps({try_mount_point(i): o for i, o in asked.items()})).json()["mounts"]
    first, later = scan[try_mount_point(10)], scan[try_mount_point(11)]
    assert first["transports"] == later["transports"] == 2
    assert not [f for f in first["findings"] if f["reason"] == "NconnectIgnored"]
    ignored = [f for f in later["findings"] if f["reason"] == "NconnectIgnored"]
    assert len(ignored) == 1 and (ignored[0]["expected"], ignored[0]["actual"]) == (6, 2), later["findings"]
