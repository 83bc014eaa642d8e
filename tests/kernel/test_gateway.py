"""An NFSv3-only gateway without rpcbind, as `spec.backend.kind: nfsv3-gateway` describes it.

In a VM of its own (rpcbind is stopped on purpose), after the server registered its services:
a v3 mount that names the NFS and MOUNT ports works without rpcbind, one that does not is
refused, and one that keeps locking on (no nolock) is refused too: the lock manager it starts cannot
register with rpcbind. The options a gateway profile validates are the ones the kernel then has in
effect.
"""

import json
import re
from collections.abc import Iterator

import pytest
import yaml
from tests.kernel.conftest import boot

from mountwarden.core.policy import resolve_policy
from mountwarden.lab.experiments import EXPORT, Lab
from mountwarden.lab.livescan import mount_point as try_mount_point

pytestmark = pytest.mark.timeout(1800)

@pytest.fixture(scope="module")
def gateway(lab_image) -> Iterator[dict]:
    vm = boot(lab_image)
    try:
        lab = Lab.start(vm)
        services = vm.run("rpcinfo -p", timeout=60).stdout
        # "100005    3   tcp  20048  mountd": the MOUNT v3 service's TCP port, while rpcbind still says it.
        found = re.search(r"100005\s+3\s+tcp\s+(\d+)\s+mountd", services)
        assert found, services
        vm.run("kill $(pidof rpcbind)", timeout=60)
        yield {"lab": lab, "mountport": int(found.group(1))}
    finally:
        vm.stop()


#: What the kernel logs when the NFS lock manager (lockd) cannot register with rpcbind (ECONNREFUSED).
LOCKD_UNREGISTERED = "failed to register lockdv1 RPC service (errno 111)"


def options_with_ports(gateway, *extra: str) -> str:
    return ",".join(["vers=3", "proto=tcp", "port=2049", f"mountport={gateway['mountport']}", "mountproto=tcp",
                     *extra])


def test_a_v3_mount_that_names_its_ports_needs_no_rpcbind(gateway):
    lab: Lab = gateway["lab"]
    point = lab.mount(options_with_ports(gateway, "nolock"), at=try_mount_point(0))
    lab.vm.run(f"echo through-the-gateway > {point}/hello", timeout=120)
    assert lab.vm.read_text(f"{EXPORT}/hello").strip() == "through-the-gateway"
    effective = lab.mountstats_options(point)
    assert "vers=3" in effective and "nolock" in effective and f"mountport={gateway['mountport']}" in effective


def test_without_the_ports_the_mount_is_refused(gateway):
    lab: Lab = gateway["lab"]
    client = lab.client()
    result = lab.vm.run(f"mkdir -p /mnt/lab/noports && timeout 120 nsenter --net=/run/netns/{client.namespace} "
                        f"mount -t nfs -o vers=3,nolock,retry=0 {client.server}:{EXPORT} /mnt/lab/noports",
                        timeout=300, check=False)
    assert result.rc != 0, result


def test_without_nolock_the_mount_is_refused_as_the_lock_manager_cannot_register_with_rpcbind(gateway):
    # Each mount(2) fails with ECONNREFUSED, the kernel logging that lockd could not register with rpcbind;
    # mount.nfs would try again for its retry= time (2 minutes by default), each try refused the same way (seen
    # in this lab, 2026-12-05): retry=0 asks once.
    lab: Lab = gateway["lab"]
    client = lab.client()
    refusals_before = lab.vm.run("dmesg", timeout=60).stdout.count(LOCKD_UNREGISTERED)
    result = lab.vm.run(f"mkdir -p /mnt/lab/locking && nsenter --net=/run/netns/{client.namespace} mount -t nfs -o "
                        f"{options_with_ports(gateway, 'retry=0')} {client.server}:{EXPORT} /mnt/lab/locking",
                        timeout=300, check=False)
    assert result.rc != 0 and "Connection refused" in result.stderr, result
    assert "/mnt/lab/locking" not in lab.vm.read_text("/proc/mounts")
    assert lab.vm.run("dmesg", timeout=60).stdout.count(LOCKD_UNREGISTERED) > refusals_before


def test_the_gateway_profile_accepts_what_the_kernel_runs_with(gateway):
    lab: Lab = gateway["lab"]
    effective = lab.mountstats_options(try_mount_point(0))
    asked = [option for option in effective if option.split("=")[0] in ("vers", "port", "mountport", "nolock")]
    policy = resolve_policy(provisioner="nfs.csi.k8s.io", cache_policy="read-only", mount_options=asked,
                            kind="nfsv3-gateway")
    assert policy.valid and policy.warnings == (), (asked, policy.errors, policy.warnings)


def test_the_gateways_client_setup_audits_clean_against_a_profile_that_declares_it(gateway):
    # The gateway's recommended client setup (vers=3, its NFS and MOUNT ports, nolock, read-only), as a profile
    # declares it: the volume is mounted with the class's options, as the kubelet would, and audited. The kernel
    # shows nolock as nolock,local_lock=all; neither may read as drift.
    lab: Lab = gateway["lab"]
    spec = {"backend": {"provisioner": "nfs.csi.k8s.io", "kind": "nfsv3-gateway"}, "cachePolicy": "read-only",
            "mountOptions": ["vers=3", "proto=tcp", "port=2049", f"mountport={gateway['mountport']}",
                             "mountproto=tcp", "nolock"]}
    policy = resolve_policy(provisioner="nfs.csi.k8s.io", cache_policy="read-only", mount_options=spec["mountOptions"],
                            kind="nfsv3-gateway")
    assert policy.valid, policy.errors
    point = lab.mount(",".join(policy.mount_options), at=try_mount_point(1))
    (lab.vm.io_dir / "gateway-profile.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "mountwarden.io/v1alpha1", "kind": "StorageProfile", "metadata": {"name": "gateway"},
         "spec": spec}))
    result = lab.vm.mountwarden("audit", "--proc-root", "/proc", "--profile", "/mnt/lab-io/gateway-profile.yaml",
                                "--json", check=False)
    audit = json.loads(result.stdout)
    (volume,) = [v for v in audit["volumes"] if v["mount_point"] == point]
    assert {"nolock", "local_lock=all", "ro", "vers=3"} <= set(volume["effective_options"]), volume
    assert volume["compliant"] and volume["findings"] == [], volume["findings"]
