"""The lab's second reading of /proc, by plain text and stat(), against the parsers.

The lab's measurements go through mountwarden's own parsers (mountinfo, mountstats, locks),
which are also the code under test: a parser bug would be shared by the oracle. So the guest
script that makes the measurement (lab/guest/measure.py, standard library only) reads the same
captures a second way: the device of each mount by stat(), its transports by counting the xprt:
lines of its raw mountstats block, the lock lines of a file by matching its inode in raw
/proc/locks, delegations from /proc/locks' DELEG lines and the server's leases switch. Every one
of those must equal what the parsers make of the same text.
"""

from collections import Counter


def test_every_raw_reading_agrees_with_the_parsers(measured):
    disagreeing = [check for check in measured.raw_checks if not check.agrees]
    assert disagreeing == []


def test_each_kind_of_raw_reading_was_made(measured):
    kinds = Counter(check.what for check in measured.raw_checks)
    # Each live sharing pair: two devices, two transport counts, and whether they share a superblock.
    pairs = len(measured.facts["superblock_sharing"])
    assert kinds["shared superblock"] == pairs and kinds["device"] >= 2 * pairs and kinds["transports"] >= 2 * pairs
    locks = len(measured.facts["locking"])
    assert kinds["lock lines"] == kinds["lock devices"] == kinds["client lock on the mount's superblock"] == locks
    assert kinds["delegations"] == 1


def test_the_lock_lines_read_raw_name_the_client_and_the_server(measured):
    # An NFSv4 lock: the client's line on the NFS superblock and nfsd's copy on the exported file system.
    devices = [check.raw for check in measured.raw_checks if check.what == "lock devices"]
    assert len(devices) == len(measured.facts["locking"])
    assert all(len(found) >= 1 for found in devices), devices
    assert any(len(set(found)) == 2 for found in devices), devices
