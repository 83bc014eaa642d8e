"""What the presets promise and what drift the agent sees, against the real kernel.

- Drift nobody declared: a pod volume mounted with the cached preset's options plus the
  incident's `sync` (or `noac`) is audited against the cached preset on the VM's live
  /proc; the finding names the option, its effect and where it probably came from.
- Why no preset is for SQLite: a POSIX lock (SQLite takes one per transaction) drops the
  file's cached data when the client holds no delegation, as EFS never grants one, so even
  the cached preset reads the file from the server again under a lock.
- Throughput in the report: bytes written and read through a pod volume come back as the
  agent's bytes per second, from the kernel's own counters.
"""

import pytest

from mountwarden.lab.experiments import EFS_LIKE, preset_mount_options

#: Measuring under TCG on a loaded machine: the session VM's boot counts against the first test too.
pytestmark = pytest.mark.timeout(1800)

KUBELET = "/var/lib/kubelet"
POD = "0a1b0000-7a11-4000-8000-0000000012a1"


def pod_volume(name: str) -> str:
    return f"{KUBELET}/pods/{POD}/volumes/kubernetes.io~nfs/{name}"


@pytest.fixture(scope="module")
def audited(lab):
    """Three pod volumes, all asked for as the cached preset on EFS: as declared, plus sync, plus noac."""
    cached = preset_mount_options("cached")
    lab.mount(cached, at=pod_volume("as-declared"))
    lab.mount(f"{cached},sync", at=pod_volume("with-sync"))
    lab.mount(f"{EFS_LIKE},noac", at=pod_volume("with-noac"))
    result = lab.vm.mountwarden("audit", "--proc-root", "/proc", "--kubelet-root", KUBELET, "--preset", "cached",
                                "--efs", "--json", check=False)
    volumes = {volume["mount_point"]: volume for volume in result.json()["volumes"]}
    return result, volumes


def test_the_audit_fails_on_drift_nobody_declared(audited):
    result, _ = audited
    assert result.rc == 1, result.stderr[-2000:]


def test_a_mount_as_declared_is_compliant(audited):
    _, volumes = audited
    volume = volumes[pod_volume("as-declared")]
    assert volume["compliant"] is True, volume["findings"]


def test_an_undeclared_sync_is_named_with_its_effect_and_origin(audited):
    _, volumes = audited
    volume = volumes[pod_volume("with-sync")]
    assert "sync" in volume["effective_options"]  # mountstats prints it: the kernel has it
    (finding,) = volume["findings"]
    assert (finding["reason"], finding["option"], finding["severity"]) == ("UndeclaredOption", "sync", "error")
    assert "Every write() waits for the server" in finding["message"]
    assert "the 8-hour import (the incident)" in finding["message"]
    assert "a CSI driver's default" in finding["message"]


def test_noac_is_seen_for_what_it_is(audited):
    _, volumes = audited
    volume = volumes[pod_volume("with-noac")]
    options = set(volume["effective_options"])
    assert {"sync", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0"} <= options
    by_option = {finding["option"]: finding for finding in volume["findings"]}
    # The cached preset declares the attribute-cache times: their drift is declared drift; sync nobody declared.
    assert by_option["acregmax"]["reason"] == "OptionMismatch"
    assert by_option["sync"]["reason"] == "UndeclaredOption"


def test_a_lock_drops_the_cache_even_with_the_cached_preset(lab):
    reads = lab.workload("lockcache", lab.mount(EFS_LIKE), lab.mount(preset_mount_options("cached")))
    assert reads["first_read"]["READ"] >= 1, reads
    assert reads["second_read"]["READ"] == 0, reads  # cached: nothing asked of the server
    assert reads["read_under_a_lock"]["READ"] >= reads["first_read"]["READ"], reads  # all of it again


def test_the_report_says_how_many_bytes_went_through_the_volume(lab):
    point = pod_volume("throughput")
    lab.mount(preset_mount_options("staging"), at=point)
    megabytes = 32
    lab.vm.run(f"dd if=/dev/zero of={point}/blob bs=1M count={megabytes} conv=fsync status=none", timeout=600)
    lab.vm.run(f"sync; echo 3 > /proc/sys/vm/drop_caches; cat {point}/blob > /dev/null", timeout=600)
    report = lab.vm.mountwarden("agent", "--once", "--dry-run", "--node-name", "lab", "--proc-root", "/proc",
                                "--probe-timeout", "0", "--process-samples", "0", timeout=600).json()["spec"]
    volume = next(v for v in report["volumes"] if v["mountPoint"] == point)
    activity = volume["activity"]
    assert activity["since"] == "mount" and activity["connections"] == 1
    written = activity["writeBytesPerSecond"] * activity["windowSeconds"]
    read = activity["readBytesPerSecond"] * activity["windowSeconds"]
    # The rates are over the mount's age in whole seconds: the totals come back within a second's rounding.
    assert written >= megabytes * 2**20 * 0.9, activity
    assert read >= megabytes * 2**20 * 0.9, activity
    assert report["kernelRelease"] == lab.vm.kernel_release
