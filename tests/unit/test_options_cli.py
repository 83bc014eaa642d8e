"""`mountwarden options check | explain | presets`: what a script and a person get, and the exit codes."""

import json

from typer.testing import CliRunner

from mountwarden.cli import app

#: The cached preset on EFS as /proc/mounts prints it, plus the incident's sync.
CACHED_WITH_SYNC = ("rw,sync,relatime,vers=4.1,rsize=1048576,wsize=1048576,namlen=255,acregmin=600,acregmax=600,"
                    "acdirmin=600,acdirmax=600,hard,noresvport,proto=tcp,timeo=600,retrans=2,sec=sys,"
                    "clientaddr=10.0.1.7,local_lock=none,addr=10.0.0.9")


def run(*args):
    return CliRunner().invoke(app, list(args))


def test_check_names_an_undeclared_sync_and_exits_1():
    result = run("options", "check", "--preset", "cached", "--efs", "--actual", CACHED_WITH_SYNC, "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["compliant"] is False
    (finding,) = document["findings"]
    assert (finding["option"], finding["actual"], finding["undeclared"], finding["severity"]) == (
        "sync", True, True, "error")
    words = run("options", "check", "--preset", "cached", "--efs", "--actual", CACHED_WITH_SYNC)
    assert words.exit_code == 1 and "sync is in effect but the contract does not declare it" in " ".join(
        words.stdout.split())


def test_check_of_the_same_mount_without_sync_is_compliant():
    result = run("options", "check", "--preset", "cached", "--efs", "--actual", CACHED_WITH_SYNC.replace("sync,", ""))
    assert result.exit_code == 0, result.output


def test_explain_nconnect_keeps_the_per_flow_reasoning_at_any_value():
    for value in ("1", "3", "16"):
        result = run("options", "explain", f"nconnect={value}", "--json")
        (explained,) = json.loads(result.stdout)["options"]
        assert "5 Gbit/s between EC2 instances outside a cluster placement group" in explained["consequence"]
        assert "ceil(min(instance bandwidth, file-system limit) / 5 Gbit/s)" in explained["consequence"]
        assert "10.2 Gbit/s" in explained["consequence"] and "benchmark the value" in explained["consequence"]


def test_explain_says_what_the_kernel_makes_of_504_kib():
    (explained,) = json.loads(run("options", "explain", "wsize=516096", "--json").stdout)["options"]
    assert explained["consequence"].startswith("The kernel keeps wsize=516096 (504 KiB): a whole number of pages")


def test_explain_nosharecache_carries_nfs5s_data_risk_and_what_the_lab_measured():
    (explained,) = json.loads(run("options", "explain", "nosharecache", "--json").stdout)["options"]
    assert ("differ only in timeo, retrans, resvport, nconnect, max_connect, fsc, bsize or mountproto"
            in explained["consequence"])
    assert "nfs(5) calls that a data risk" in explained["consequence"]


def test_presets_list_the_promises_and_the_deprecated_name():
    document = json.loads(run("options", "presets", "--json").stdout)
    names = [preset["name"] for preset in document["presets"]]
    assert names == ["strict", "staging", "cached", "read-only"]
    staging = document["presets"][1]
    assert staging["promise"]["statByPath"].startswith("Never stale")
    assert "SQLite" in staging["notFor"] and "15:29" in document["sqliteAndSmallFiles"]
    (deprecated,) = document["deprecated"]
    assert (deprecated["name"], deprecated["replacedBy"]) == ("coherent", "staging")
    cached = document["presets"][2]
    assert "Up to 10 minutes" in cached["promise"]["statByPath"] and "Up to 10 minutes" in cached["promise"]["newFiles"]
