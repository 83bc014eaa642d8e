"""A soak: the operator through many profile and report changes, its memory flat and its metrics tidy.

Profiles come and go in batches (each reconciled into a class, checked for compliance, its metric
series written, then deleted), while the node report of one pod changes every batch with a new
drift to post. Whatever the operator remembers of them must go with them: the resident set of its
process, after a warm-up, stays flat, and /metrics names no deleted profile.
"""

import psutil
import pytest
from tests.integration.test_compliance import profile_with_a_pod
from tests.support import GROUP, VERSION, profile_body, put_report, scrape, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.chaos]

BATCH = 10
#: The resident set still grows by half a MiB or more per batch through the first seven or eight batches, then by
#: under 0.1 MiB, with a step now and then (five runs, 2026-12-05). With four warm-up batches one CI run failed: its
#: second half grew 2.26 MiB, from steps of 0.51, 1.41 and 0.58 MiB in batches 11 to 13 (the first half, after eight).
WARM_UP_BATCHES = 8
MEASURED_BATCHES = 12
MIB = 1024 * 1024
#: What the resident set may still move once warm (allocator arenas, kopf's queues): a leak of even 20 KiB
#: per profile would add ~2.3 MiB over the measured batches, and grow batch after batch.
ALLOWED_GROWTH = 8 * MIB
SECOND_HALF_GROWTH = 2 * MIB


def rss(operator) -> int:
    return psutil.Process(operator.process.pid).memory_info().rss


def write_report(kube, node: str, uid: str, pv: str, acregmax: int) -> None:
    """The node's report: the pod's volume mounted with an acregmax of the moment (a new drift each time)."""
    spec = {"nodeName": node, "scanTime": "2026-01-01T00:00:00Z", "agentVersion": "soak", "networkFstypes": ["nfs4"],
            "volumes": [{"podUid": uid, "volumeName": pv, "plugin": "nfs", "fstype": "nfs4",
                         "source": "nas.example.com:/soak", "server": "nas.example.com", "export": "/soak",
                         "mountPoint": f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~nfs/data",
                         "superblock": "0:77", "optionsSource": "mountstats",
                         "effectiveOptions": ["vers=4.1", "hard", f"acregmax={acregmax}", "lookupcache=positive"]}]}
    put_report(kube, node, spec)


def batch(kube, unique: str, number: int, node: str, uid: str, pv: str) -> list[str]:
    names = [f"soak-{unique}-{number}-{n}" for n in range(BATCH)]
    for name in names:
        kube.apply_profile(profile_body(name, "coherent", backend={"provisioner": "nfs.csi.k8s.io"}))
    write_report(kube, node, uid, pv, acregmax=100 + number)
    # Reconciled and checked: each has its class, its conditions and its compliance series.
    wait_for(lambda: all(kube.condition(name, "Compliant") for name in names), timeout=180,
             what=f"batch {number} reconciled and checked")
    for name in names:
        kube.delete_profile(name)
    wait_for(lambda: not any(kube.profile(name) for name in names), timeout=180, what=f"batch {number} gone")
    return names


def test_memory_stays_flat_and_deleted_profiles_leave_no_series(cluster, kube, operator, namespace, unique):
    node = cluster.node_names[0]
    home = f"soak-{unique}"
    pv, uid = profile_with_a_pod(kube, namespace, node, home, "cached", "soaked")

    deleted: list[str] = []
    for number in range(WARM_UP_BATCHES):
        deleted += batch(kube, unique, number, node, uid, pv)
    warm = rss(operator)
    samples = []
    for number in range(WARM_UP_BATCHES, WARM_UP_BATCHES + MEASURED_BATCHES):
        deleted += batch(kube, unique, number, node, uid, pv)
        samples.append(rss(operator))

    # Every deleted profile's series are gone; the long-lived one's stay.
    wait_for(lambda: not {dict(labels).get("profile") for _, labels in scrape(operator.metrics_port)} & set(deleted),
             what="the deleted profiles' series removed")
    assert any(dict(labels).get("profile") == home for _, labels in scrape(operator.metrics_port))
    growth = [sample - warm for sample in samples]
    assert max(growth) < ALLOWED_GROWTH, f"RSS grew by {[round(g / MIB, 1) for g in growth]} MiB per batch"
    # Flat: the second half of the measured batches adds next to nothing (a steady leak would add as much as
    # the first half).
    half = len(samples) // 2
    assert samples[-1] - samples[half] < SECOND_HALF_GROWTH, f"RSS still grows: {[round(g / MIB, 2) for g in growth]}"
    # One report per batch, each with its own drift (a finding or two): remembered by finding, not by churn.
    posted = scrape(operator.metrics_port)[("mountwarden_posted_findings", ())]
    assert 0 < posted <= 2 * (WARM_UP_BATCHES + MEASURED_BATCHES)
    print(f"RSS {warm / MIB:.1f} MiB when warm; then {[round(g / MIB, 2) for g in growth]} MiB more")
    operator.assert_running()
    kube.delete_profile(home)
    kube.custom.delete_cluster_custom_object(GROUP, VERSION, "nodemountreports", node)
