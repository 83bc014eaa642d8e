"""Replicas under kopf peering on a real API server: one that stops being active ends, and starts afresh.

kopf never tells a resumed replica's indexes of what was deleted while it was paused
(mountwarden.handlers.standby), so a replica that has been active and is paused must not live on to
be active again. Two `mountwarden operator --peering` processes share a ClusterKopfPeering object, as
the chart's replicas do; the higher priority takes over, the demoted one exits with EXIT_STOOD_DOWN;
started again (what the Deployment does), it stands by without exiting and becomes active once the
other leaves.
"""

import json
import uuid
from pathlib import Path

import pytest
from tests.integration.moto_server import dummy_aws_environment
from tests.support import ROOT, OperatorProcess, free_port, wait_for

from mountwarden.adapters import certs
from mountwarden.handlers.standby import EXIT_STOOD_DOWN

pytestmark = pytest.mark.cluster

PEERING_CRD = ROOT / "charts" / "mountwarden" / "crds" / "kopf.dev_clusterkopfpeerings.yaml"
ACTIVE_LINE = "this replica is the active one"


@pytest.fixture
def peering(cluster, crds_installed):
    cluster.kubectl("apply", "-f", str(PEERING_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/clusterkopfpeerings.kopf.dev")
    name = f"mw-peering-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=f"apiVersion: kopf.dev/v1\nkind: ClusterKopfPeering\n"
                                              f"metadata:\n  name: {name}\n")
    yield name
    cluster.kubectl("delete", "clusterkopfpeering", name, "--ignore-not-found")


def peers(cluster, peering: str) -> dict:
    """The peering object's live peers (kopf writes null for one that left)."""
    body = json.loads(cluster.kubectl("get", "clusterkopfpeering", peering, "-o", "json").stdout)
    return {name: fields for name, fields in (body.get("status") or {}).items() if fields}


def replica(cluster, moto, log_dir: Path, peering: str, identity: str, priority: int) -> OperatorProcess:
    log_dir.mkdir()
    certs.issue(log_dir / "certs", ["localhost"])  # what the chart mounts from its Secret
    env = {**dummy_aws_environment(log_dir), "AWS_ENDPOINT_URL": moto.endpoint_url, "POD_ID": identity}
    return OperatorProcess(str(cluster.kubeconfig), log_dir, extra_env=env, args=(
        "--peering", "--peering-name", peering, "--priority", str(priority),
        # Its own webhook server, registered nowhere: two local registrations would overwrite each other.
        "--webhook-mode", "cluster", "--webhook-port", str(free_port()), "--webhook-cert-dir", str(log_dir / "certs")))


def test_a_replica_that_loses_the_active_role_exits_and_comes_back_as_a_standby(
        cluster, peering, _moto_server_process, tmp_path):
    low = replica(cluster, _moto_server_process, tmp_path / "low", peering, "replica-low", 10)
    high = replica(cluster, _moto_server_process, tmp_path / "high", peering, "replica-high", 20)
    try:
        low.start()
        wait_for(lambda: ACTIVE_LINE in low.logs(), timeout=60, what="the only replica active")
        high.start()
        wait_for(lambda: low.process.poll() is not None, timeout=60, what="the demoted replica's exit")
        assert low.process.returncode == EXIT_STOOD_DOWN, low.logs()[-3000:]
        assert "another replica is the active one now: this one stops and starts afresh" in low.logs()
        wait_for(lambda: ACTIVE_LINE in high.logs(), timeout=60, what="the higher priority active")

        low.start()  # what the Deployment does with the exited container
        wait_for(lambda: "replica-low" in peers(cluster, peering), timeout=60, what="the new standby in the peering")
        assert ACTIVE_LINE not in low.log_path.read_text()  # it never was active: it lists nothing, nothing to lose
        high.stop()  # a clean exit withdraws it from the peering object at once
        wait_for(lambda: ACTIVE_LINE in low.log_path.read_text(), timeout=60, what="the standby active")
        low.assert_running()
        high_log = high.logs()
        assert "another replica is the active one now" not in high_log, high_log[-3000:]
    finally:
        low.stop()
        high.stop()
