"""The agent loop: failures are counted and survived, /metrics is served, SIGTERM stops it cleanly."""

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from tests.procroot import Mount, assemble_proc_root, pod_uid
from tests.support import free_port

from mountwarden.agent.loop import Agent, AgentSettings, PrintedReport, run_agent
from mountwarden.agent.report import RefusedWrite, WriteOutcome


def settings(proc_root, **overrides):
    values = {"node_name": "node-a", "proc_root": proc_root, "kubelet_root": "/var/lib/kubelet",
              "network_fstypes": ("nfs", "nfs4"), "interval_seconds": 1.0, "metrics_port": 0, **overrides}
    return AgentSettings(**values)


class RecordingSink:
    def __init__(self, error=None):
        self.specs = []
        self.error = error

    def sync(self, spec):
        self.specs.append(spec)
        if self.error is not None:
            raise self.error
        return WriteOutcome.CREATED


def counter(agent, name):
    return agent.metrics.registry.get_sample_value(name) or 0


def test_a_failed_scan_is_counted_and_nothing_is_written(tmp_path):
    sink = RecordingSink()
    agent = Agent(settings(tmp_path), sink)

    assert agent.step() is False
    assert counter(agent, "mountwarden_agent_scan_errors_total") == 1
    assert sink.specs == []


def test_a_failed_write_is_counted_and_the_next_step_tries_again(tmp_path):
    assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=pod_uid("a"))])
    sink = RecordingSink(error=ConnectionRefusedError("API server away"))
    agent = Agent(settings(tmp_path), sink)

    assert agent.step() is False
    sink.error = None
    assert agent.step() is True

    assert counter(agent, "mountwarden_agent_write_errors_total") == 1
    assert agent.metrics.registry.get_sample_value("mountwarden_agent_report_writes_total",
                                                   {"outcome": "created"}) == 1
    assert len(sink.specs) == 2


def test_a_refusal_is_not_a_failure_to_retry(tmp_path):
    assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=pod_uid("a"))])
    agent = Agent(settings(tmp_path), RecordingSink(error=RefusedWrite("not this node")))

    with pytest.raises(RefusedWrite):
        agent.step()


def test_the_agent_exits_leaving_a_stuck_call_behind_and_says_which(tmp_path, caplog):
    assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=pod_uid("a"))])
    agent = Agent(settings(tmp_path), RecordingSink())
    server_back = threading.Event()

    def statvfs(path):
        server_back.wait()

    agent.proc.calls.run("0:53", statvfs, "/var/lib/kubelet/pods/a/volumes/pv-a", timeout=0.05)
    with caplog.at_level(logging.WARNING, logger="mountwarden.agent.loop"):
        assert run_agent(agent, once=True) is True
    assert "exiting with 1 call(s) still blocked in the kernel" in caplog.text
    assert "statvfs(/var/lib/kubelet/pods/a/volumes/pv-a) on 0:53" in caplog.text
    server_back.set()


def test_a_scan_that_waited_for_a_dead_server_says_how_long_and_where_the_rest_went(tmp_path, caplog, monkeypatch):
    assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=pod_uid("a"))])
    server_back = threading.Event()
    monkeypatch.setattr("mountwarden.agent.probe.statvfs", lambda *paths: server_back.wait())
    agent = Agent(settings(tmp_path, probe_timeout_seconds=0.2), RecordingSink())
    try:
        with caplog.at_level(logging.DEBUG, logger="mountwarden.agent.loop"):
            assert agent.step() is True
    finally:
        server_back.set()
    said = re.search(r"scanned 1 volume\(s\) in [\d.]+s \(([\d.]+) s of it waiting for servers that did not "
                     r"answer\); report created", caplog.text)
    account = re.search(r"scan time [\d.]+ s: [\d.]+ s on CPU, ([\d.]+) s waiting for servers that did not answer, "
                        r"[\d.]+ s between process samples, [\d.]+ s otherwise off CPU", caplog.text)
    assert said and account, caplog.text
    assert float(said.group(1)) >= 0.2 and float(account.group(1)) >= 0.2, caplog.text  # the probe's timeout


def test_dry_run_prints_the_object_that_would_be_written(tmp_path):
    assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=pod_uid("a"))])
    out = io.StringIO()

    assert Agent(settings(tmp_path), PrintedReport(out)).step() is True

    body = json.loads(out.getvalue())
    assert body["metadata"] == {"name": "node-a"}
    assert body["spec"]["volumes"][0]["podUid"] == pod_uid("a")


def scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return ""


def metric(text, name):
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")
              or line.startswith(name + "{")]
    return sum(values)


def wait_until(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {condition}")


def test_the_agent_process_survives_failed_scans_serves_metrics_and_stops_on_sigterm(tmp_path):
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    port = free_port()
    command = [sys.executable, "-m", "mountwarden", "agent", "--node-name", "node-a", "--proc-root", str(proc_root),
               "--interval", "1", "--metrics-port", str(port), "--dry-run"]
    with (tmp_path / "out.json").open("w") as out, (tmp_path / "err.log").open("w") as err:
        agent = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
    try:
        # Nothing to read yet: every scan fails, the loop goes on.
        wait_until(lambda: metric(scrape(port), "mountwarden_agent_scan_errors_total") >= 2)
        assert agent.poll() is None
        assemble_proc_root(proc_root, [Mount("pv-a", pod_uid=pod_uid("a"), sample_mount="/D")])
        text = wait_until(lambda: (t := scrape(port)) and metric(t, "mountwarden_agent_volumes") == 1 and
                          "mountwarden_nfs_operations_per_second{" in t and t)
        assert f'pod_uid="{pod_uid("a")}"' in text and 'volume="pv-a"' in text

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
    log = (tmp_path / "err.log").read_text()
    assert "received SIGTERM" in log and "Traceback" in log  # the failed scans were logged with their cause
    assert scrape(port) == ""  # the metrics server is gone with the process


class OnePod:
    """The agent's view of its node's pods (agent/pods.py's NodePods), with one pod of a Deployment."""

    def __init__(self, uid):
        from mountwarden.agent.pods import NodePod

        self.pod = NodePod(uid, "web-5f7c9-abcde", "shop", "ReplicaSet/web-5f7c9", {}, "Deployment/web")

    def get(self, uid):
        return self.pod if uid == self.pod.uid else None

    def claim_of(self, pod, volume_name):
        return None


def test_the_agent_labels_each_volumes_series_with_its_pods_namespace_and_workload(tmp_path):
    uid = pod_uid("web")
    assemble_proc_root(tmp_path, [Mount("pv-a", pod_uid=uid, sample_mount="/D")])
    agent = Agent(settings(tmp_path, process_samples=1), RecordingSink(), pods=OnePod(uid))
    assert agent.step() and agent.step()

    labels = [sample.labels for family in agent.metrics.registry.collect() for sample in family.samples
              if family.name.startswith("mountwarden_nfs_")]
    assert labels and all((label["namespace"], label["workload"], label["pod_uid"]) == ("shop", "Deployment/web", uid)
                          for label in labels)
