"""`mountwarden lab try`, the command users run, end to end: a real kernel answers."""

import json
import os
import subprocess
import sys

import pytest

from mountwarden.core.options.normalize import kernel_io_size


def lab_try(*args: str, tmp_path) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "mountwarden", "lab", "try", *args, "--json"],
                            capture_output=True, text=True, timeout=1200, env=dict(os.environ), cwd=tmp_path)
    assert result.stdout.strip(), f"lab try printed no JSON (exit {result.returncode}): {result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def trial(lab_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("lab-try")
    result = lab_try("vers=4.1,timeo=100", "vers=4.1,timeo=600", "vers=4.1,bogus", "vers=4.1,acregmax=7",
                     "--out", str(out / "proc"), tmp_path=out)
    return result, out / "proc"


def test_it_answers_from_a_real_kernel(trial):
    result, _ = trial
    document = json.loads(result.stdout)
    assert document["kernel"].startswith("6.1"), document["kernel"]
    assert document["server_max_io"] == 1048576
    assert [m["index"] for m in document["mounts"]] == [0, 1, 2, 3]


def test_a_later_mount_that_differs_in_timeo_shares_the_first_superblock(trial):
    mounts = json.loads(trial[0].stdout)["mounts"]
    assert mounts[0]["shares_superblock_with"] is None
    assert mounts[1]["shares_superblock_with"] == 0
    assert mounts[1]["superblock"] == mounts[0]["superblock"]
    assert "timeo=100" in mounts[1]["effective"] and "timeo=100" in mounts[1]["mountinfo_options"]
    assert {f["reason"] for f in mounts[1]["findings"]} == {"OptionMismatch", "SuperblockShared"}
    assert mounts[3]["shares_superblock_with"] is None and mounts[3]["findings"] == []
    assert mounts[0]["transports"] == 1


def test_an_unknown_option_is_reported_with_the_kernels_own_error(trial):
    result, _ = trial
    refused = json.loads(result.stdout)["mounts"][2]
    assert refused["mounted"] is False
    assert "Unknown parameter 'bogus'" in refused["error"], refused["error"]
    assert result.returncode == 2  # the kernel refused a mount: bad input
    assert "Traceback" not in result.stderr


def test_out_keeps_the_raw_proc_files(trial):
    _, proc = trial
    assert "nfs4" in (proc / "mountinfo").read_text()
    assert "xprt:" in (proc / "mountstats").read_text()
    assert (proc / "locks").exists() and (proc / "dmesg").exists()


def test_a_server_with_a_lower_maximum_negotiates_rsize_down(lab_image, tmp_path):
    result = lab_try("vers=4.1,rsize=1048576,wsize=524288", "--server-max-io", "131072", tmp_path=tmp_path)
    document = json.loads(result.stdout)
    mount = document["mounts"][0]
    assert document["server_max_io"] == 131072
    assert "rsize=131072" in mount["effective"] and "wsize=131072" in mount["effective"]
    assert kernel_io_size(1048576, 131072) == kernel_io_size(524288, 131072) == 131072
    messages = [f["message"] for f in mount["findings"] if f["option"] == "rsize"]
    assert messages and "negotiated it down" in messages[0], mount["findings"]
    assert result.returncode == 1  # findings, nothing refused
