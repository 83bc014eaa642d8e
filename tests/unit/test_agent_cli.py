"""`mountwarden audit` and `mountwarden agent --dry-run` on assembled proc roots: output and exit codes."""

import json
import logging
import textwrap

import pytest
from tests.procroot import Mount, assemble_proc_root, pod_uid
from typer.testing import CliRunner

from mountwarden.cli import app

A, B, C = pod_uid("a"), pod_uid("b"), pod_uid("c")


@pytest.fixture(autouse=True)
def root_logging_restored():
    """`agent` configures the process's logging (its stream is the runner's, closed afterwards): undo it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def run(*args, env=None):
    return CliRunner().invoke(app, [str(arg) for arg in args], env=env)


@pytest.fixture
def node(tmp_path):
    """/C (NFSv3, defaults, lock) for pod a; /A (NFSv3, nolock, actimeo 60) shared by pods b and c."""
    mounts = [
        Mount("pv-plain", pod_uid=A, sample_mount="/C"),
        Mount("pv-nolock", pod_uid=B, superblock="nolock", sample_mount="/A"),
        Mount("pv-nolock", pod_uid=C, superblock="nolock"),
    ]
    return assemble_proc_root(tmp_path / "proc", mounts), mounts


def profile_file(tmp_path, spec):
    path = tmp_path / "profile.yaml"
    header = "apiVersion: mountwarden.io/v1alpha1\nkind: StorageProfile\nmetadata: {name: nas-default}\nspec:\n"
    path.write_text(header + textwrap.indent(spec, "  "))
    return path


def test_audit_without_a_contract_lists_the_volumes_and_exits_0(node):
    assembled, mounts = node
    result = run("audit", "--proc-root", assembled.path, "--json")

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["policy"] is None and document["compliant"] is True
    assert {(v["pod_uid"], v["volume_name"]) for v in document["volumes"]} == {(m.pod_uid, m.volume) for m in mounts}
    shared = next(v for v in document["volumes"] if v["pod_uid"] == B)
    assert shared["shared_with"] == [assembled.mount_point(mounts[2])]
    assert document["kubelet_roots"] == ["/var/lib/kubelet"]


def test_audit_against_a_profile_that_holds_exits_0(tmp_path):
    # Only /C, mounted with the kernel defaults: /A's nolock and actimeo=60 would be drift, declared or not.
    assembled = assemble_proc_root(tmp_path / "proc", [Mount("pv-plain", pod_uid=A, sample_mount="/C")])
    profile = profile_file(tmp_path, textwrap.dedent("""\
        backend: {provisioner: nfs.csi.k8s.io}
        mountOptions: ["vers=3", "hard"]
        requiredOptions: [hard]
        """))
    result = run("audit", "--proc-root", assembled.path, "--profile", profile, "--json")

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["policy"]["source"].startswith("StorageProfile nas-default")
    assert document["policy"]["required"] == ["hard"]


def test_audit_findings_exit_1_and_name_the_other_consumer(node, tmp_path):
    assembled, mounts = node
    # retrans=2 is what both samples have; the profile asks for 5, which a shared superblock would hide.
    profile = profile_file(tmp_path, textwrap.dedent("""\
        backend: {provisioner: nfs.csi.k8s.io}
        mountOptions: ["vers=3", "retrans=5"]
        forbiddenOptions: [nolock]
        """))
    result = run("audit", "--proc-root", assembled.path, "--profile", profile, "--json")

    assert result.exit_code == 1, result.output
    volumes = {v["pod_uid"]: v for v in json.loads(result.stdout)["volumes"]}
    assert [f["option"] for f in volumes[A]["findings"]] == ["retrans"]
    mismatched = {f["option"] for f in volumes[B]["findings"] if f["reason"] == "OptionMismatch"}
    assert {"nolock", "retrans"} <= mismatched
    findings = {f["reason"]: f for f in volumes[B]["findings"]}
    assert findings["SuperblockShared"]["other_mounts"] == [assembled.mount_point(mounts[2])]
    assert f"pod {C}" in findings["SuperblockShared"]["message"]


def test_audit_against_a_preset_in_words(node):
    assembled, _ = node
    result = run("audit", "--proc-root", assembled.path, "--preset", "cached", "--efs")

    assert result.exit_code == 1
    assert "Checking against preset cached on EFS" in result.stdout
    assert "SuperblockShared" in result.stdout and "nosharecache" in result.stdout
    assert "3 volume(s), 3 with findings." in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "cached", "--profile", "p.yaml"], "not both"),
        (["--efs"], "--efs applies to --preset only"),
        (["--preset", "lazy"], "lazy"),
    ],
)
def test_audit_bad_arguments_exit_2(node, args, message):
    assembled, _ = node
    result = run("audit", "--proc-root", assembled.path, *args)

    assert result.exit_code == 2
    assert message in result.stderr


def test_audit_of_a_proc_root_without_a_mount_table_exits_2(tmp_path):
    missing = run("audit", "--proc-root", tmp_path / "nowhere")
    empty = run("audit", "--proc-root", tmp_path)

    assert (missing.exit_code, empty.exit_code) == (2, 2)
    assert "not a directory" in missing.stderr and "mountinfo" in empty.stderr


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("backend: {provisioner: nfs.csi.k8s.io}\nmountOptions: [vers=3, noac, actimeo=30]\n", "contradicts itself"),
        ("backend: {}\n", "not a valid StorageProfile"),
        ("backend: [unclosed\n", "not YAML"),
    ],
)
def test_audit_with_a_broken_profile_exits_2(node, tmp_path, spec, message):
    assembled, _ = node
    result = run("audit", "--proc-root", assembled.path, "--profile", profile_file(tmp_path, spec))

    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_agent_once_dry_run_prints_the_report_of_the_node_named_in_the_environment(node):
    assembled, mounts = node
    result = run("agent", "--proc-root", assembled.path, "--once", "--dry-run", env={"NODE_NAME": "node-7"})

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["metadata"]["name"] == body["spec"]["nodeName"] == "node-7"
    assert len(body["spec"]["volumes"]) == len(mounts)


def test_agent_once_exits_1_when_the_scan_fails(tmp_path):
    result = run("agent", "--node-name", "node-7", "--proc-root", tmp_path, "--once", "--dry-run")

    assert result.exit_code == 1
    assert result.stdout == ""


def test_without_the_sqlite_scan_the_agent_reads_no_other_process(tmp_path):
    """--no-sqlite-scan (the chart's agent.readOtherProcesses=false): no finding, whatever /proc/locks says."""
    from tests.unit.test_agent_faults import node as node_with_a_sqlite_lock

    assembled = node_with_a_sqlite_lock(tmp_path)
    scanned = run("agent", "--node-name", "n", "--proc-root", assembled.path, "--once", "--dry-run")
    assert scanned.exit_code == 0, scanned.output
    assert len(json.loads(scanned.stdout)["spec"]["sqlite"]) == 1
    unprivileged = run("agent", "--node-name", "n", "--proc-root", assembled.path, "--once", "--dry-run",
                       "--no-sqlite-scan")
    assert unprivileged.exit_code == 0, unprivileged.output
    assert json.loads(unprivileged.stdout)["spec"].get("sqlite", []) == []


def test_the_agent_reads_its_own_mount_table_when_told_and_the_hosts_otherwise(node, tmp_path):
    """--mount-table own (the chart's agent.root=false): <proc-root>/self, the agent's own mount namespace with the
    pods directory propagated in, where the host's pid 1 tables are refused to a uid other than 0 (kernel lab,
    tests/kernel/test_unprivileged_node_reading.py)."""
    assembled, mounts = node
    host, own = assembled.path / "1", assembled.path / "self"
    own.mkdir()
    for name in ("mountinfo", "mountstats"):
        (host / name).rename(own / name)
    (host / "mountinfo").write_text("")  # what a reader that may not see the host's table gets here

    seen = run("agent", "--node-name", "n", "--proc-root", assembled.path, "--once", "--dry-run",
               "--probe-timeout", "0", "--mount-table", "own")
    assert seen.exit_code == 0, seen.output
    volumes = json.loads(seen.stdout)["spec"]["volumes"]
    assert len(volumes) == len(mounts) and {v["optionsSource"] for v in volumes} == {"mountstats"}
    hosts = run("agent", "--node-name", "n", "--proc-root", assembled.path, "--once", "--dry-run",
                "--probe-timeout", "0")
    assert hosts.exit_code == 1 and "1/mountinfo is missing, unreadable or empty" in hosts.output
