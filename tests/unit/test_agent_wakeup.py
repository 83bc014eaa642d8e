"""The agent wakes on the host's mount table: a real mount on this machine's kernel, not a simulation."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mountwarden.agent.wakeup import Wakeup


@pytest.fixture
def mount_point(tmp_path):
    """A directory to mount a tmpfs on (needs root, as the agent's own tests of the real /proc do)."""
    target = tmp_path / "mnt"
    target.mkdir()
    yield target
    subprocess.run(["umount", str(target)], capture_output=True)


def mount_tmpfs(target: Path, source: str = "mountwarden-test") -> None:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", source, str(target)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs (the test needs root): {done.stderr}"


def test_a_mount_wakes_the_waiter(mount_point):
    wakeup = Wakeup(Path("/proc/1/mountinfo"))
    try:
        assert wakeup.follows_mounts
        mount_tmpfs(mount_point)
        assert wakeup.wait(60)
        assert wakeup.mount_events >= 1
    finally:
        wakeup.close()


def test_a_file_that_is_no_mount_table_never_wakes_it_but_a_nudge_does(tmp_path):
    sample = tmp_path / "mountinfo"
    sample.write_text("22 1 0:21 / / rw - ext4 /dev/root rw\n")
    wakeup = Wakeup(sample)
    try:
        assert not wakeup.wait(0.2)
        wakeup.nudge()
        assert wakeup.wait(60)
        assert wakeup.mount_events == 0
    finally:
        wakeup.close()


def test_the_agent_reports_a_new_mount_long_before_its_next_scan(tmp_path):
    """--interval 3600: only the mount table's change can make the second report."""
    kubelet = tmp_path / "kubelet"
    uid = str(uuid.uuid4())
    volume = kubelet / "pods" / uid / "volumes" / "kubernetes.io~nfs" / "pv-wakeup"
    volume.mkdir(parents=True)
    command = [sys.executable, "-m", "mountwarden", "agent", "--node-name", "node-a", "--proc-root", "/proc",
               "--kubelet-root", str(kubelet), "--network-fstypes", "tmpfs", "--interval", "3600",
               "--probe-timeout", "0", "--metrics-port", "0", "--dry-run"]
    out_path = tmp_path / "reports.json"
    with out_path.open("w") as out, (tmp_path / "err.log").open("w") as err:
        agent = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
    decoder = json.JSONDecoder()

    def reports() -> list[dict]:
        text, found, at = out_path.read_text(), [], 0
        while (start := text.find("{", at)) != -1:
            try:
                document, at = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                break
            found.append(document)
        return found

    def wait_for(condition, what):
        deadline = time.monotonic() + 120
        while not (value := condition()):
            assert agent.poll() is None, (tmp_path / "err.log").read_text()
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)
        return value

    try:
        wait_for(reports, "the first report")
        mount_tmpfs(volume, "server.example:/export")
        found = wait_for(lambda: [r for r in reports() for v in r["spec"]["volumes"]
                                  if v["mountPoint"] == str(volume)], "a report with the new mount")
        (volume_entry,) = [v for v in found[0]["spec"]["volumes"] if v["mountPoint"] == str(volume)]
        assert volume_entry["podUid"] == uid and volume_entry["volumeName"] == "pv-wakeup"
    finally:
        subprocess.run(["umount", str(volume)], capture_output=True)
        os.killpg(agent.pid, signal.SIGTERM)
        assert agent.wait(timeout=30) == 0
    assert "received SIGTERM" in (tmp_path / "err.log").read_text()
