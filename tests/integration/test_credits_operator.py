"""The operator's credit watch: moto's CloudWatch series become profile status, conditions and Events."""

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.credit_scenarios import HOUR, nightly_drain
from tests.integration.moto_server import aligned_now, create_mount_targets, seed, seed_scenario
from tests.integration.test_compliance import pod_with, report_once, volume_for
from tests.procroot import Mount, assemble_proc_root
from tests.support import profile_body, wait_for

MOUNTWARDEN = Path(sys.executable).with_name("mountwarden")

pytestmark = [pytest.mark.cluster, pytest.mark.aws]


def credits_of(kube, name):
    return ((kube.profile(name) or {}).get("status") or {}).get("credits")


def watched(name, file_system_id):
    return profile_body(name, "cached", creditWatch={"fileSystemId": file_system_id, "windowHours": 3})


def test_forecasts_reach_status_conditions_events_and_metrics(kube, operator, moto_server, unique):
    ids = seed(moto_server, aligned_now())
    names = {state: f"credits-{state}-{unique}" for state in ("draining", "trap", "healthy")}
    for state, name in names.items():
        kube.apply_profile(watched(name, ids[state]))

    draining = wait_for(lambda: (c := credits_of(kube, names["draining"])) and c["state"] == "Draining" and c,
                        timeout=90, what="a Draining forecast")
    assert draining["fileSystemId"] == ids["draining"] and draining["throughputMode"] == "bursting"
    assert draining["sizeGib"] == pytest.approx(20)
    assert draining["slopeBytesPerSecond"] == pytest.approx(-96 * 1024**2, rel=0.02)
    assert 0 < draining["timeToEmptySeconds"] < 4 * 3600
    assert draining["message"].startswith("balance 1.2 TiB falling 96 MiB/s: empty in")
    condition = wait_for(lambda: kube.condition(names["draining"], "CreditsDraining"), what="CreditsDraining")
    assert (condition["status"], condition["reason"]) == ("True", "Draining")

    trap = wait_for(lambda: (c := credits_of(kube, names["trap"])) and c["state"] == "Trap" and c,
                    timeout=90, what="a Trap forecast")
    assert trap["opsBudgetPerSecond"]["writesOrMetadata"] == pytest.approx(256)
    healthy = wait_for(lambda: (c := credits_of(kube, names["healthy"])) and c["state"] == "Healthy" and c,
                       timeout=90, what="a Healthy forecast")
    assert "timeToEmptySeconds" not in healthy  # not draining: no time to empty
    assert kube.condition(names["healthy"], "CreditsDraining")["status"] == "False"

    events = wait_for(lambda: [e for e in kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={names['trap']}").items if e.reason == "CreditsTrap"],
        what="a CreditsTrap event")
    assert ids["trap"] in events[0].message and events[0].type == "Warning"

    body = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10).read().decode()
    assert f'mountwarden_credit_balance_bytes{{file_system_id="{ids["healthy"]}",profile="{names["healthy"]}"}}' in body
    assert f'mountwarden_credit_slope_bytes_per_second{{file_system_id="{ids["draining"]}"' in body


def test_unknown_file_system_says_so_and_nothing_crashes(kube, operator, moto_server, unique):
    name = f"credits-unknown-{unique}"
    kube.apply_profile(watched(name, "fs-0000000000000dead"))
    condition = wait_for(lambda: (c := kube.condition(name, "CreditsDraining")) and c["status"] == "Unknown" and c,
                         timeout=90, what="an Unknown credit condition")
    assert condition["reason"] == "Unknown" and "FileSystemNotFound" in condition["message"]
    # The condition is applied by its own field manager, apart from status.credits' patch: either may land first.
    credits = wait_for(lambda: credits_of(kube, name), timeout=90, what="status.credits")
    assert "fs-0000000000000dead" in credits["message"]
    operator.assert_running()


def test_a_nightly_drain_reads_draining_and_the_status_names_who_drains(
        cluster, kube, operator, moto_server, namespace, unique, tmp_path):
    """Two profiles on one EFS file system whose nightly job drains 598 GiB a day more than the day refills.

    The real agent (`mountwarden agent --once`) reports the pods' mounts from real mountstats captures:
    the importer's mount (/B of the telegraf sample: 9,797 READs and 60,385 metadata requests in 19 s) is
    far busier than the uploader's (/C: 746,337 metadata requests in 12.6 days).
    """
    file_system = seed_scenario(moto_server, nightly_drain(job_ends_before_end=6 * HOUR), aligned_now())
    backend = {"provisioner": "efs.csi.aws.com", "parameters": {"provisioningMode": "efs-ap",
                                                                "fileSystemId": file_system}}
    scratch, staging = f"scratch-{unique}", f"staging-{unique}"
    kube.apply_profile(profile_body(scratch, "cached", backend=backend))  # creditWatch: the CRD's defaults
    kube.apply_profile(profile_body(staging, "staging", backend=backend))
    wait_for(lambda: kube.classes_of(scratch) and kube.classes_of(staging), what="both classes")
    node = cluster.node_names[1]
    volumes = {"importer": (f"pv-importer-{unique}", f"{scratch}-v1", "/B"),
               "uploader": (f"pv-uploader-{unique}", f"{staging}-v1", "/C")}
    for pv, storage_class, _ in volumes.values():
        volume_for(kube, namespace, pv, storage_class)
    uids = {role: pod_with(kube, namespace, node, role, pv) for role, (pv, _, _) in volumes.items()}
    mounts = [Mount(pv, pod_uid=uids[role], sample_mount=sample) for role, (pv, _, sample) in volumes.items()]
    assembled = assemble_proc_root(tmp_path / "proc", mounts)
    report_once(cluster, node, assembled.path)

    credits = wait_for(lambda: (c := credits_of(kube, scratch)) and c["state"] == "Draining"
                       and len((c.get("consumers") or {}).get("top", [])) == 2 and c,
                       timeout=120, what="a Draining forecast naming two consumers")
    assert credits["timeToEmptyBasis"] == "day-over-day"
    assert credits["netChangePerDayBytes"] / 1024**3 == pytest.approx(-597.7, rel=0.01)
    assert credits["message"].startswith(f"balance {credits['message'].split()[1]} ")
    assert "GiB a day (the mean of the last 24 h against the 24 h before)" in credits["message"]
    consumers = credits["consumers"]
    assert [c["pods"] for c in consumers["top"]] == [[f"{namespace}/importer"], [f"{namespace}/uploader"]]
    importer = consumers["top"][0]
    assert importer["profiles"] == [scratch] and importer["node"] == node and importer["mountedSeconds"] == 19
    # 9,797 READs at 4 KiB a third, and 60,385 metadata requests at 4 KiB, over the mount's 19 seconds.
    assert importer["meteredBytesPerSecond"] == pytest.approx((9797 / 3 + 60385) * 4096 / 19)
    assert {p["profile"] for p in consumers["byProfile"]} == {scratch, staging}
    assert any("4 KiB" in note for note in consumers["notes"])
    # Both pods are one namespace's: its whole load, per workload (bare pods here), with no cost in Bursting mode
    # (no throughput billed) but what Elastic would bill its requests.
    [own] = consumers["namespaces"]
    assert own["namespace"] == namespace and own["share"] == pytest.approx(1)
    assert own["meteredBytesPerSecond"] == pytest.approx(consumers["estimatedMeteredBytesPerSecond"])
    assert [w["workload"] for w in own["workloads"]] == [f"{namespace}/importer", f"{namespace}/uploader"]
    assert own.get("monthlyCostUsd") is None and own["elasticMonthlyCostUsd"] > 0
    assert consumers["costBasis"].startswith("Bursting: no throughput is billed")
    # The other profile on the same file system names the same consumers.
    peer = wait_for(lambda: (c := credits_of(kube, staging)) and (c.get("consumers") or {}).get("top") and c,
                    timeout=60, what="the peer profile's consumers")
    assert [c["pods"] for c in peer["consumers"]["top"]] == [c["pods"] for c in consumers["top"]]

    body = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10).read().decode()
    assert (f'mountwarden_credit_state{{file_system_id="{file_system}",profile="{scratch}",state="Draining"}} 1.0'
            in body)
    assert f'mountwarden_credit_consumer_metered_bytes_per_second{{file_system_id="{file_system}",node="{node}",' \
           f'pod="{namespace}/importer",profile="{scratch}",volume="{volumes["importer"][0]}"}}' in body
    assert f'mountwarden_credit_net_change_bytes_per_day{{file_system_id="{file_system}",profile="{scratch}"}}' in body
    assert (f'mountwarden_credit_namespace_metered_bytes_per_second{{file_system_id="{file_system}",'
            f'namespace="{namespace}"}}') in body
    assert "mountwarden_credit_namespace_monthly_cost_usd{" not in body  # Bursting bills no throughput

    # The CLI, with the caller's kubeconfig, names the same consumers next to its own forecast.
    done = subprocess.run(
        [str(MOUNTWARDEN), "credits", "forecast", "--file-system-id", file_system, "--region", moto_server.region,
         "--endpoint-url", moto_server.endpoint_url, "--consumers", "--kubeconfig", str(cluster.kubeconfig), "--json"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["state"] == "Draining" and document["time_to_empty_basis"] == "day-over-day"
    assert [c["pods"] for c in document["consumers"]["top"]] == [[f"{namespace}/importer"], [f"{namespace}/uploader"]]
    assert [n["namespace"] for n in document["consumers"]["namespaces"]] == [namespace]
    assert document["consumers"]["cost_basis"].startswith("Bursting")


def test_the_incidents_flags_under_a_caching_preset_warn_at_admission_on_bursting_efs(
        cluster, kube, operator, moto_server, namespace, unique):
    """cachePolicy cached with sync, actimeo=0, lookupcache=none: the effective options decide, not the name."""
    ids = seed(moto_server, aligned_now())
    name = f"costly-{unique}"
    body = watched(name, ids["healthy"])
    body["spec"]["mountOptions"] = ["sync", "actimeo=0", "lookupcache=none"]
    kube.apply_profile(body)
    wait_for(lambda: (credits_of(kube, name) or {}).get("throughputMode") == "bursting", timeout=90,
             what="the throughput mode from DescribeFileSystems")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "import-scratch", "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": f"{name}-v1",
                      "resources": {"requests": {"storage": "1Gi"}}}}
    expected = (f"Warning: StorageProfile {name}: on Bursting EFS {ids['healthy']} its effective options sync, "
                "actimeo=0, lookupcache=none make every stat() and open() a round trip per path component")

    def warned(dry_run: bool) -> str:
        result = cluster.kubectl("create", "-f", "-", *(["--dry-run=server"] if dry_run else []),
                                 input=json.dumps(claim), check=False)
        assert result.returncode == 0, result.stderr
        return result.stderr

    # The webhook's index learns of the credit status a moment after it is written.
    wait_for(lambda: expected in warned(True), timeout=60, what="the warning on a dry run")
    stderr = warned(False)
    assert expected in stderr and "every write() wait for the server (nfs(5))" in stderr
    assert "use cachePolicy staging for data several clients change" in stderr


def label_zone(kube, node, zone):
    kube.core.patch_node(node, {"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}})


def test_a_volume_on_another_zones_mount_target_is_a_cross_az_mount(
        cluster, kube, operator, moto_server, namespace, unique, tmp_path, request):
    """The real agent reports a mount whose addr= (2.2.2.2: /B of the telegraf sample, 9,797 READs that received
    2,000 bytes in 19 s) is the file system's mount target in zone a (DescribeMountTargets against moto); the
    pod's node is labelled zone b."""
    file_system = seed_scenario(moto_server, nightly_drain(job_ends_before_end=6 * HOUR), aligned_now())
    targets = create_mount_targets(moto_server, file_system, {"a": "2.2.2.2", "b": "2.2.3.17"})
    zone_a, zone_b = f"{moto_server.region}a", f"{moto_server.region}b"
    name = f"zones-{unique}"
    kube.apply_profile(profile_body(name, "cached", backend={"provisioner": "efs.csi.aws.com", "parameters": {
        "provisioningMode": "efs-ap", "fileSystemId": file_system}}))
    wait_for(lambda: kube.classes_of(name), what="the class")
    node = cluster.node_names[1]
    dev_zone = kube.core.read_node(node).metadata.labels.get("topology.kubernetes.io/zone")
    label_zone(kube, node, zone_b)
    request.addfinalizer(lambda: label_zone(kube, node, dev_zone))
    pv = f"pv-far-{unique}"
    volume_for(kube, namespace, pv, f"{name}-v1")
    uid = pod_with(kube, namespace, node, "far", pv)
    assembled = assemble_proc_root(tmp_path / "proc", [Mount(pv, pod_uid=uid, sample_mount="/B")])
    report_once(cluster, node, assembled.path)

    crossing = wait_for(lambda: ((credits_of(kube, name) or {}).get("crossAzMounts") or {}).get("volumes"),
                        timeout=120, what="status.credits.crossAzMounts")
    [far] = crossing
    assert (far["pod"], far["node"], far["nodeZone"], far["volume"]) == (f"{namespace}/far", node, zone_b, pv)
    assert (far["mountTargetId"], far["mountTargetZone"], far["address"]) == (targets[zone_a], zone_a, "2.2.2.2")
    assert far["localMountTargetId"] == targets[zone_b]
    assert far["bytesPerSecond"] == pytest.approx(2000 / 19) and far["monthlyCostUsd"] == 0  # cents: a lower bound
    event = wait_for(lambda: [e for e in kube.core.list_namespaced_event(namespace).items
                              if e.reason == "CrossAZMount" and e.involved_object.name == "far"],
                     timeout=60, what="the CrossAZMount Event on the pod")
    assert f"zone {zone_b}" in event[0].message and targets[zone_a] in event[0].message
    body = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10).read().decode()
    assert (f'mountwarden_cross_az_bytes_per_second{{file_system_id="{file_system}",namespace="{namespace}",'
            f'pod="far",volume="{pv}"}}') in body

    # The pod moves to zone a (here: its node is relabelled): nothing crosses any more, and the series goes.
    label_zone(kube, node, zone_a)
    judged = wait_for(lambda: (c := (credits_of(kube, name) or {}).get("crossAzMounts")) and not c.get("volumes")
                      and c, timeout=120, what="no cross-zone volume once the node is in zone a")
    assert judged["judged"] >= 1
    body = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10).read().decode()
    assert f'mountwarden_cross_az_bytes_per_second{{file_system_id="{file_system}"' not in body
