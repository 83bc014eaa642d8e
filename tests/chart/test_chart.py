"""The Helm chart, rendered by the real helm (`helm template`, no cluster): objects, wiring, values, RBAC, dashboard.

The end-to-end suite (e2e/test_helm.py) installs the same chart into a real API server; these tests pin
what a render must say, and tie the chart to the code it runs: the flags it passes exist and parse, the
webhooks are the ones the operator serves, the RBAC grants exactly what the code calls, the dashboard
queries metrics the code exports.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest
import typer
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtensionOID

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "mountwarden"
RELEASE, NAMESPACE = "mountwarden", "storage-system"
FULLNAME = "mountwarden"
AGENT_USERNAME = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-agent"
OPERATOR_USERNAME = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-operator"
#: The ValidatingAdmissionPolicies (admission-policies.yaml), each bound under its own name.
ADMISSION_POLICIES = ("operator-workloads", "operator-volumes", "operator-pods", "operator-enforce", "agent-reports")
#: helm built from source (hack/testbin) defaults to Kubernetes 1.20 without the release ldflags: name the
#: version the tests run against.
KUBE_VERSION = next(line.split("=", 1)[1] for line in (ROOT / "hack/testbin/versions.env").read_text().splitlines()
                    if line.startswith("KUBERNETES_VERSION="))


# -- rendering ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm(request) -> Path:
    """helm of $MOUNTWARDEN_TESTBIN_DIR (make test), else the one on PATH, else built with the control plane."""
    on_path = shutil.which("helm")
    if on_path and not os.environ.get("MOUNTWARDEN_TESTBIN_DIR"):
        return Path(on_path)
    return request.getfixturevalue("testbin").helm


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory) -> dict[str, str]:
    scratch = tmp_path_factory.mktemp("helm")
    return {"HELM_CONFIG_HOME": str(scratch / "config"), "HELM_CACHE_HOME": str(scratch / "cache"),
            "HELM_DATA_HOME": str(scratch / "data"), "PATH": "/usr/bin:/bin"}


def run_helm(helm: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, env=env)


def template(helm: Path, env: dict[str, str], *args: str, release: str = RELEASE,
             namespace: str = NAMESPACE) -> list[dict]:
    result = run_helm(helm, env, "template", release, str(CHART), "--namespace", namespace,
                      "--kube-version", KUBE_VERSION, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def render(helm, helm_env):
    return lambda *args, **kwargs: template(helm, helm_env, *args, **kwargs)


@pytest.fixture(scope="module")
def default(render) -> list[dict]:
    return render()


def find(docs: Iterable[dict], kind: str, name: str | None = None) -> dict:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name}: {[d['metadata']['name'] for d in matches]}"
    return matches[0]


def kinds(docs: Iterable[dict]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def container(workload: dict) -> dict:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def flag(args: list[str], name: str) -> str:
    values = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{name}=")]
    assert len(values) == 1, f"{name} given {len(values)} times in {args}"
    return values[0]


# -- CRDs ---------------------------------------------------------------------------------------------------


def test_the_charts_crds_are_the_generated_ones_byte_for_byte():
    generated = {path.name: path.read_bytes() for path in (ROOT / "crds").glob("*.yaml")}
    shipped = {path.name: path.read_bytes() for path in (CHART / "crds").glob("*.yaml")}
    assert generated, "crds/ is empty"
    stale = [name for name in generated if shipped.get(name) != generated[name]]
    assert not stale, f"charts/mountwarden/crds/ differs from crds/ in {stale}: run `make chart`"
    assert set(shipped) - set(generated) == {"kopf.dev_clusterkopfpeerings.yaml"}


def test_the_peering_crd_is_the_one_kopf_uses():
    from kopf._cogs.structs import references

    crd = yaml.safe_load((CHART / "crds" / "kopf.dev_clusterkopfpeerings.yaml").read_text())
    selector = references.CLUSTER_PEERINGS_K
    assert crd["metadata"]["name"] == f"{selector.any_name}.{selector.group}"
    assert (crd["spec"]["group"], crd["spec"]["scope"], crd["spec"]["names"]["kind"]) == (
        selector.group, "Cluster", "ClusterKopfPeering")
    (version,) = crd["spec"]["versions"]
    assert version["name"] == selector.version and version["served"] and version["storage"]
    # kopf writes {identity: {priority, lifetime, lastseen}} into status: it must not be pruned.
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert "subresources" not in version  # kopf patches status on the object itself


# -- what a default install makes ---------------------------------------------------------------------------


def test_a_default_render_makes_these_objects(default):
    assert kinds(default) == sorted([
        ("ClusterKopfPeering", FULLNAME),
        ("ClusterRole", f"{FULLNAME}-agent"), ("ClusterRole", f"{FULLNAME}-operator"),
        ("ClusterRoleBinding", f"{FULLNAME}-agent"), ("ClusterRoleBinding", f"{FULLNAME}-operator"),
        ("DaemonSet", f"{FULLNAME}-agent"),
        ("Deployment", f"{FULLNAME}-operator"),
        ("PodDisruptionBudget", f"{FULLNAME}-operator"),
        ("Role", f"{FULLNAME}-operator"), ("RoleBinding", f"{FULLNAME}-operator"),
        ("Secret", f"{FULLNAME}-webhook-tls"),
        ("Service", f"{FULLNAME}-agent-metrics"), ("Service", f"{FULLNAME}-operator-metrics"),
        ("Service", f"{FULLNAME}-webhook"),
        ("ServiceAccount", f"{FULLNAME}-agent"), ("ServiceAccount", f"{FULLNAME}-operator"),
        *((kind, f"{FULLNAME}-{policy}") for policy in ADMISSION_POLICIES
          for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")),
        ("ValidatingWebhookConfiguration", FULLNAME), ("ValidatingWebhookConfiguration", f"{FULLNAME}-enforce"),
    ])
    namespaced = [d for d in default if d["kind"] not in (
        "ClusterKopfPeering", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {NAMESPACE}


def test_names_follow_the_release(render):
    assert {name for _, name in kinds(render(release="storage"))} >= {"storage-mountwarden-operator",
                                                                       "storage-mountwarden"}
    long = render(release="long-" * 10 + "rel")  # Helm's longest: 53 characters
    assert all(len(d["metadata"]["name"]) <= 63 for d in long)


# -- the operator ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "threshold"), [(60, 3), (61, 4), (300, 15)])
def test_liveness_seconds_round_up_to_whole_probe_periods(render, seconds, threshold):
    """operator.livenessSeconds is never shortened: a budget between two probes gets the later one."""
    operator = container(find(render("--set", f"operator.livenessSeconds={seconds}"), "Deployment"))
    assert operator["livenessProbe"]["periodSeconds"] == 20
    assert operator["livenessProbe"]["failureThreshold"] == threshold


def test_the_operator_runs_two_peers_with_everything_wired(default):
    deployment = find(default, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    operator = container(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert operator["image"] == "mountwarden:0.1.0"  # the chart's appVersion
    # Until the first answer, the liveness probe waits operator.startupSeconds (minutes under emulation).
    assert operator["startupProbe"]["httpGet"] == operator["livenessProbe"]["httpGet"]
    assert operator["startupProbe"]["periodSeconds"] * operator["startupProbe"]["failureThreshold"] >= 120
    # Then a minute without an answer (operator.livenessSeconds) before a restart.
    assert operator["livenessProbe"]["periodSeconds"] * operator["livenessProbe"]["failureThreshold"] == 60
    args = operator["args"]
    assert args[0] == "operator" and "--peering" in args and not any(a.startswith("--priority") for a in args)
    assert flag(args, "--peering-name") == FULLNAME
    assert flag(args, "--webhook-mode") == "cluster"
    assert flag(args, "--liveness") == "http://0.0.0.0:8080/healthz"
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in operator["ports"]} == {"webhook": 9443, "metrics": 9800,
                                                                           "health": 8080}
    assert flag(args, "--webhook-port") == "9443" and flag(args, "--metrics-port") == "9800"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in operator["env"]}
    assert env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "POD_ID": "metadata.name"}
    mount = next(m for m in operator["volumeMounts"] if m["name"] == "webhook-certs")
    assert mount["readOnly"] and mount["mountPath"] == flag(args, "--webhook-cert-dir")
    assert next(v for v in spec["volumes"] if v["name"] == "webhook-certs")["secret"]["secretName"] == (
        f"{FULLNAME}-webhook-tls")
    assert spec["serviceAccountName"] == f"{FULLNAME}-operator"
    assert spec["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}}]
    assert find(default, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1, "selector": deployment["spec"]["selector"]}


def test_the_operator_is_locked_down(default):
    deployment = find(default, "Deployment")
    pod = deployment["spec"]["template"]["spec"]["securityContext"]
    assert pod["runAsNonRoot"] and pod["runAsUser"] == 65532 and pod["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(deployment)["securityContext"]
    assert security == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}}
    assert container(deployment)["resources"] == {"requests": {"cpu": "50m", "memory": "256Mi"},
                                                  "limits": {"memory": "1Gi"}}


def test_the_wiring_between_objects_is_consistent(default):
    """Flags name objects the chart makes, under the same names."""
    args = container(find(default, "Deployment"))["args"]
    service = find(default, "Service", f"{FULLNAME}-webhook")
    assert flag(args, "--webhook-service") == f"{NAMESPACE}/{service['metadata']['name']}"
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    # The Service routes to the active replica only: the one that carries --active-label.
    active = flag(args, "--active-label")
    pod_labels = find(default, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selector = service["spec"]["selector"]
    assert selector[active] == "true" and active not in pod_labels
    assert {k: v for k, v in selector.items() if k != active}.items() <= pod_labels.items()
    # The enforce configuration, the peering object and the agent's account are the ones RBAC names.
    enforce = find(default, "ValidatingWebhookConfiguration", flag(args, "--enforce-configuration"))
    assert "webhooks" not in enforce  # the active operator writes them
    find(default, "ClusterKopfPeering", flag(args, "--peering-name"))
    agent_account = flag(args, "--agent-service-account")
    assert agent_account == f"{NAMESPACE}:{find(default, 'DaemonSet')['spec']['template']['spec']['serviceAccountName']}"


def test_every_flag_the_chart_passes_exists_and_parses(default, monkeypatch):
    from mountwarden.cli import app

    command = typer.main.get_command(app)
    monkeypatch.setenv("NODE_NAME", "node-a")  # the downward API's value in a pod
    for workload in (find(default, "Deployment"), find(default, "DaemonSet")):
        subcommand, *args = container(workload)["args"]
        # Parses every option with its type and bounds, and runs nothing.
        command.commands[subcommand].make_context(subcommand, list(args))


# -- the agent ------------------------------------------------------------------------------------------------


def test_the_agent_reads_the_hosts_proc_on_every_node(default):
    daemonset = find(default, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    agent = container(daemonset)
    assert agent["args"][0] == "agent"
    assert flag(agent["args"], "--proc-root") == "/host/proc"
    assert flag(agent["args"], "--kubelet-root") == "/var/lib/kubelet"
    assert flag(agent["args"], "--network-fstypes") == "nfs,nfs4"
    assert flag(agent["args"], "--interval") == "30" and flag(agent["args"], "--heartbeat") == "300"
    assert agent["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True} in agent["volumeMounts"]
    assert {"name": "host-proc", "hostPath": {"path": "/proc", "type": "Directory"}} in spec["volumes"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert "hostPID" not in spec and "hostNetwork" not in spec
    assert spec["serviceAccountName"] == f"{FULLNAME}-agent"


UNSUPPORTED = [{"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate"]},
               {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]
NOT_CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}


def agent_node_terms(docs) -> list[dict]:
    affinity = find(docs, "DaemonSet")["spec"]["template"]["spec"].get("affinity") or {}
    return (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution", {}).get(
        "nodeSelectorTerms")


def test_the_agent_is_kept_off_nodes_it_cannot_run_on_whatever_affinity_is_given(render, default):
    from mountwarden.core.node.kinds import UNSUPPORTED_NODE_LABELS

    assert agent_node_terms(default) == [{"matchExpressions": [*UNSUPPORTED, NOT_CONTROL_PLANE]}]
    # The chart's exclusions are the labels the operator explains a missing report by.
    assert {(e["key"], e["values"][0]) for e in UNSUPPORTED} == set(UNSUPPORTED_NODE_LABELS)
    pool = {"key": "pool", "operator": "In", "values": ["a"]}
    named = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [pool]}, {"matchFields": [named]}]}},
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    docs = render("--set-json", f"agent.affinity={json.dumps(affinity)}")
    # Terms are ORed: each one must exclude those nodes.
    assert agent_node_terms(docs) == [{"matchExpressions": [pool, *UNSUPPORTED, NOT_CONTROL_PLANE]},
                                      {"matchExpressions": [*UNSUPPORTED, NOT_CONTROL_PLANE], "matchFields": [named]}]
    assert "podAffinity" in find(docs, "DaemonSet")["spec"]["template"]["spec"]["affinity"]
    assert agent_node_terms(render("--set-json", "agent.unsupportedNodes=[]")) == [
        {"matchExpressions": [NOT_CONTROL_PLANE]}]
    assert "affinity" not in find(render("--set-json", "agent.unsupportedNodes=[]", "--set",
                                         "agent.controlPlaneNodes=true"), "DaemonSet")["spec"]["template"]["spec"]


def test_the_agent_is_kept_off_control_plane_nodes_unless_asked_and_the_operator_is_told(render, default):
    def operator_args(docs) -> list[str]:
        return find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert NOT_CONTROL_PLANE in agent_node_terms(default)[0]["matchExpressions"]
    assert "--no-agent-on-control-plane" in operator_args(default)
    asked = render("--set", "agent.controlPlaneNodes=true")
    assert agent_node_terms(asked) == [{"matchExpressions": UNSUPPORTED}]
    assert "--no-agent-on-control-plane" not in operator_args(asked)


@pytest.mark.parametrize(("read_other_processes", "probe_servers", "capabilities", "flags"), [
    # SQLite detection reads other processes' fd, fdinfo and maps: ptrace read access, other users' directories.
    ("true", "true", ["SYS_PTRACE", "DAC_READ_SEARCH"], []),
    ("true", "false", ["SYS_PTRACE", "DAC_READ_SEARCH"], ["--probe-timeout=0"]),
    # The statvfs() probe follows /proc/1/root: ptrace read access to pid 1, nothing else.
    ("false", "true", ["SYS_PTRACE"], ["--no-sqlite-scan"]),
    # The mount table, NFS statistics and /proc/locks need nothing.
    ("false", "false", [], ["--no-sqlite-scan", "--probe-timeout=0"]),
])
def test_the_agent_gets_only_the_capabilities_its_enabled_features_need(render, read_other_processes, probe_servers,
                                                                        capabilities, flags):
    daemonset = find(render("--set", f"agent.readOtherProcesses={read_other_processes}",
                            "--set", f"agent.probeServers={probe_servers}"), "DaemonSet")
    agent = container(daemonset)
    assert agent["securityContext"] == {
        "privileged": False, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], **({"add": capabilities} if capabilities else {})}}
    pod = daemonset["spec"]["template"]["spec"]["securityContext"]
    # uid 0 always: capabilities take effect only for it, and the host's mountstats is root's, mode 0400.
    assert pod["runAsUser"] == 0 and not pod["runAsNonRoot"]
    # A feature without its privileges is switched off, not left to fail on every scan.
    assert [arg for arg in agent["args"] if arg in ("--no-sqlite-scan", "--probe-timeout=0")] == flags


def test_an_agent_that_is_not_root_reads_its_own_mount_namespace_with_no_capability(render, helm, helm_env):
    """agent.root=false: the image's user, nothing added, the kubelet's pods directory propagated in at its own
    path (read-only), the node's network for the RPC NULL call (docs/security.md's kernel facts)."""
    daemonset = find(render("--set", "agent.root=false", "--set", "agent.readOtherProcesses=false"), "DaemonSet")
    pod, agent = daemonset["spec"]["template"]["spec"], container(daemonset)
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (65532, True)
    assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"--mount-table=own", "--probe=null", "--no-sqlite-scan"} <= set(agent["args"])
    assert "--probe-timeout=0" not in agent["args"]
    (propagated,) = [m for m in agent["volumeMounts"] if m["name"] == "kubelet-pods"]
    assert propagated == {"name": "kubelet-pods", "mountPath": "/var/lib/kubelet/pods", "readOnly": True,
                          "mountPropagation": "HostToContainer"}
    (source,) = [v for v in pod["volumes"] if v["name"] == "kubelet-pods"]
    assert source["hostPath"] == {"path": "/var/lib/kubelet/pods", "type": "Directory"}
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    without_probe = container(find(render("--set", "agent.root=false", "--set", "agent.readOtherProcesses=false",
                                          "--set", "agent.probeServers=false"), "DaemonSet"))
    assert "--probe-timeout=0" in without_probe["args"]
    assert without_probe["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # As root (the default) nothing of it: the host's tables, no host network.
    default = find(render(), "DaemonSet")["spec"]["template"]["spec"]
    assert "hostNetwork" not in default and not any(v["name"] == "kubelet-pods" for v in default["volumes"])
    refused = run_helm(helm, helm_env, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                       "--set", "agent.root=false")
    assert refused.returncode != 0 and "set agent.readOtherProcesses=false as well" in refused.stderr


def agent_rules(objects) -> list[dict]:
    return next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-agent"))["rules"]


def test_without_name_pods_the_agent_may_read_no_pod(render, default):
    granted = {resource for rule in agent_rules(default) for resource in rule["resources"]}
    assert {"pods", "persistentvolumeclaims"} <= granted and "--no-name-pods" not in container(
        find(default, "DaemonSet"))["args"]
    without = render("--set", "agent.namePods=false")
    assert {resource for rule in agent_rules(without) for resource in rule["resources"]} == {
        "nodes", "nodemountreports"}
    assert "--no-name-pods" in container(find(without, "DaemonSet"))["args"]


def notes(helm, helm_env, tmp_path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (helm template leaves it out: rendered here through tpl)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n'
        '  notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n')
    result = run_helm(helm, helm_env, "template", RELEASE, str(chart), "--namespace", NAMESPACE,
                      "--show-only", "templates/notes.yaml", *args)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["data"]["notes"]


def test_the_notes_say_what_reading_other_processes_amounts_to(helm, helm_env, tmp_path):
    text = " ".join(notes(helm, helm_env, tmp_path).split())
    assert "equivalent to reading any host process's memory maps and open files" in text
    assert "SQLite detection needs it" in text and "runs as root with SYS_PTRACE and DAC_READ_SEARCH" in text
    text = " ".join(notes(helm, helm_env, tmp_path / "without", "--set", "agent.readOtherProcesses=false",
                          "--set", "agent.probeServers=false").split())
    assert "readOtherProcesses" not in text and "runs as root" not in text
    assert "runs as uid 0 with no capability" in text


def test_the_defaults_enable_every_feature(default):
    agent = container(find(default, "DaemonSet"))
    assert agent["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE", "DAC_READ_SEARCH"]
    assert "--no-sqlite-scan" not in agent["args"] and "--probe-timeout=0" not in agent["args"]


# -- values -------------------------------------------------------------------------------------------------


def test_values_reach_the_flags_and_env(render):
    docs = render(
        "--set", "logLevel=debug", "--set", "agent.interval=60", "--set", "agent.heartbeat=600",
        "--set", "agent.kubeletRoot=/data/kubelet", "--set", "agent.networkFstypes={nfs4,nfs}",
        "--set", "operator.creditInterval=120", "--set", "operator.aws.region=eu-west-1",
        "--set", "operator.stuckAfterSeconds=20", "--set", "operator.failureIntervalSeconds=3",
        "--set", "operator.aws.roleArn=arn:aws:iam::123456789012:role/mountwarden",
        "--set", "operator.networkProvisioners={example.com/nas,file.csi.azure.com}",
        "--set", "operator.replicas=1", "--set", "image.tag=dev", "--set", "image.repository=registry.local/mw",
        "--set", "image.pullSecrets[0].name=regcred", "--set", "operator.priorityClassName=mw-critical",
        "--set", "agent.priorityClassName=system-node-critical",
    )
    operator, agent = container(find(docs, "Deployment")), container(find(docs, "DaemonSet"))
    assert "--verbose" in operator["args"] and "--verbose" in agent["args"]
    assert flag(agent["args"], "--interval") == "60" and flag(agent["args"], "--heartbeat") == "600"
    assert flag(agent["args"], "--kubelet-root") == "/data/kubelet"
    assert flag(agent["args"], "--network-fstypes") == "nfs4,nfs"
    assert flag(operator["args"], "--credit-interval") == "120"
    assert flag(operator["args"], "--stuck-after") == "20" and flag(operator["args"], "--failure-interval") == "3"
    assert [a for a in operator["args"] if a.startswith("--network-provisioner=")] == [
        "--network-provisioner=example.com/nas", "--network-provisioner=file.csi.azure.com"]
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in operator["env"]
    account = find(docs, "ServiceAccount", f"{FULLNAME}-operator")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/mountwarden"}
    assert operator["image"] == agent["image"] == "registry.local/mw:dev"
    for workload, priority_class in ((find(docs, "Deployment"), "mw-critical"),
                                     (find(docs, "DaemonSet"), "system-node-critical")):
        spec = workload["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["priorityClassName"] == priority_class
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]  # one replica: nothing to keep running


def test_defaults_leave_out_what_is_not_asked_for(default):
    operator, agent = container(find(default, "Deployment")), container(find(default, "DaemonSet"))
    assert "--verbose" not in operator["args"] and "--verbose" not in agent["args"]
    assert not any(a.startswith("--network-provisioner") for a in operator["args"])
    assert "AWS_REGION" not in {e["name"] for e in operator["env"]}
    assert "annotations" not in find(default, "ServiceAccount", f"{FULLNAME}-operator")["metadata"]
    assert "imagePullSecrets" not in find(default, "Deployment")["spec"]["template"]["spec"]


def test_the_schema_refuses_unknown_keys_and_wrong_types(helm, helm_env):
    for args, complaint in (
        (["--set", "operator.replica=3"], "additional properties 'replica' not allowed"),
        (["--set", "agent.interval=often"], "/agent/interval"),
        (["--set", "logLevel=trace"], "/logLevel"),
        (["--set", "operator.replicas=0"], "/operator/replicas"),
        (["--set", "operator.aws.roleArn=my-role"], "/operator/aws/roleArn"),
        (["--set", "policyReports.format=kyverno"], "/policyReports/format"),
    ):
        result = run_helm(helm, helm_env, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, *args)
        assert result.returncode != 0 and complaint in result.stderr, (args, result.stderr)


def leaf_paths(values: dict, prefix: str = "") -> list[str]:
    """Every value's dotted path; free-form maps and lists are leaves (templates take them whole)."""
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in FREE_FORM:
            paths.extend(leaf_paths(value, f"{path}."))
        else:
            paths.append(path)
    return paths


#: Maps whose keys are the user's (labels, requests...), not the chart's.
FREE_FORM = {"resources", "labels", "annotations", "podAnnotations", "nodeSelector", "affinity", "issuerRef"}
TEMPLATES = "\n".join(path.read_text() for path in sorted((CHART / "templates").glob("*")))
REFERENCES = set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", TEMPLATES))


def test_every_value_is_used_by_a_template():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    unused = [path for path in leaf_paths(values) if path not in REFERENCES]
    assert not unused, f"values no template reads: {unused}"


def test_every_value_a_template_reads_is_declared():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert len(REFERENCES) >= 10, REFERENCES
    for reference in REFERENCES:
        node = values
        for part in reference.split("."):
            assert isinstance(node, dict) and part in node, f".Values.{reference} is not in values.yaml"
            node = node[part]


def test_the_schema_describes_every_value_and_accepts_the_defaults():
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)

    def schema_paths(node: dict, prefix: str = "") -> set[str]:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
        properties = node.get("properties")
        if not properties or prefix.rstrip(".").rsplit(".", 1)[-1] in FREE_FORM:
            return {prefix.rstrip(".")}
        return {path for key, child in properties.items() for path in schema_paths(child, f"{prefix}{key}.")}

    described = schema_paths(schema)
    assert set(leaf_paths(values)) - described == set()


# -- webhooks and TLS -----------------------------------------------------------------------------------------


def test_the_webhooks_are_the_ones_the_operator_serves(default):
    """The chart's configuration is what the operator renders for itself, pointed at the Service."""
    from mountwarden.adapters.webhookconfig import render_configuration
    from mountwarden.handlers.config import OperatorConfig
    from mountwarden.handlers.runner import register_handlers

    configuration = find(default, "ValidatingWebhookConfiguration", FULLNAME)
    ca_bundle = find(default, "Secret")["data"]["ca.crt"]
    expected = render_configuration(
        {"service": {"namespace": NAMESPACE, "name": f"{FULLNAME}-webhook", "port": 443}, "caBundle": ca_bundle},
        excluded=["kube-system", NAMESPACE], agent_username=AGENT_USERNAME, fail_closed=True)
    assert configuration["webhooks"] == expected["webhooks"]
    served = {handler.id for handler in register_handlers(OperatorConfig())._webhooks.get_all_handlers()}
    assert {hook["clientConfig"]["service"]["path"].lstrip("/") for hook in configuration["webhooks"]} <= served
    failing = [hook["name"] for hook in configuration["webhooks"] if hook["failurePolicy"] == "Fail"]
    assert failing == ["nodemountreport.mountwarden.io"]


def test_kube_system_is_excluded_once_when_the_chart_lives_there(render):
    configuration = find(render(namespace="kube-system"), "ValidatingWebhookConfiguration", FULLNAME)
    assert configuration["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


def test_exempt_namespaces_reach_the_webhooks_the_operator_and_the_enforce_policy(render, default):
    """webhook.exemptNamespaces: left out of the chart's PVC webhook, passed to the operator (which leaves them out of
    the deny webhooks it writes) and required by the policy on what it writes; the exempt label, in all three."""
    from mountwarden.adapters.webhookconfig import EXEMPT_LABEL, excluded_namespaces, render_configuration
    from mountwarden.cli import app
    from mountwarden.handlers.config import OperatorConfig

    docs = render("--set", "webhook.exemptNamespaces={batch,ops}")
    configuration = find(docs, "ValidatingWebhookConfiguration", FULLNAME)
    ca_bundle = find(docs, "Secret")["data"]["ca.crt"]
    expected = render_configuration(
        {"service": {"namespace": NAMESPACE, "name": f"{FULLNAME}-webhook", "port": 443}, "caBundle": ca_bundle},
        excluded=excluded_namespaces(NAMESPACE, ["batch", "ops"]), agent_username=AGENT_USERNAME, fail_closed=True)
    assert configuration["webhooks"] == expected["webhooks"]
    assert configuration["webhooks"][0]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE, "batch", "ops"]},
        {"key": EXEMPT_LABEL, "operator": "NotIn", "values": ["true"]}]

    subcommand, *args = container(find(docs, "Deployment"))["args"]
    params = typer.main.get_command(app).commands[subcommand].make_context(subcommand, list(args)).params
    assert params["exempt_namespaces"] == ["batch", "ops"]
    assert OperatorConfig(exempt_namespaces=tuple(params["exempt_namespaces"])).exempt_namespaces == ("batch", "ops")
    assert not any(a.startswith("--exempt-namespace") for a in container(find(default, "Deployment"))["args"])

    enforce = " ".join(v["expression"] for v in find(
        docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-operator-enforce")["spec"]["validations"])
    assert f'["kube-system","{NAMESPACE}","batch","ops"].all(n, n in e.values)' in enforce
    assert f'e.key == "{EXEMPT_LABEL}" && e.operator == \'NotIn\' && \'true\' in e.values' in enforce


def test_an_exempt_namespace_must_be_a_namespace_name(helm, helm_env):
    result = run_helm(helm, helm_env, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                      "--set", "webhook.exemptNamespaces={Batch_Jobs}")
    assert result.returncode != 0 and "/webhook/exemptNamespaces/0" in result.stderr, result.stderr


def certificate(pem_b64: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(pem_b64))


def test_the_charts_own_certificate_serves_the_service_name(default):
    secret = find(default, "Secret")
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    ca, cert = certificate(secret["data"]["ca.crt"]), certificate(secret["data"]["tls.crt"])
    names = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value.get_values_for_type(
        x509.DNSName)
    assert f"{FULLNAME}-webhook.{NAMESPACE}.svc" in names
    cert.verify_directly_issued_by(ca)
    for hook in find(default, "ValidatingWebhookConfiguration", FULLNAME)["webhooks"]:
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]


def test_with_cert_manager_it_issues_and_injects(render):
    docs = render("--set", "webhook.certManager.enabled=true")
    assert not [d for d in docs if d["kind"] == "Secret"]
    issuer = find(docs, "Issuer")
    certificate_ = find(docs, "Certificate")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate_["spec"]["secretName"] == f"{FULLNAME}-webhook-tls"
    assert certificate_["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert f"{FULLNAME}-webhook.{NAMESPACE}.svc" in certificate_["spec"]["dnsNames"]
    configuration = find(docs, "ValidatingWebhookConfiguration", FULLNAME)
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{certificate_['metadata']['name']}"}
    assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])

    docs = render("--set", "webhook.certManager.enabled=true", "--set", "webhook.certManager.issuerRef.kind=ClusterIssuer",
                  "--set", "webhook.certManager.issuerRef.name=corp-ca")
    assert not [d for d in docs if d["kind"] == "Issuer"]
    assert find(docs, "Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


# -- RBAC -----------------------------------------------------------------------------------------------------

# Every Kubernetes client call in the operator's handlers and adapters, and what RBAC it needs:
# (API group, resource, verb, resource name or None, namespace or None for cluster-wide).
# The calls of the generic client (CustomObjectsApi), by method name:
PEERING_NAME, ENFORCE_NAME = FULLNAME, f"{FULLNAME}-enforce"
CLIENT_CALLS = {
    # Rollout ticks read profiles; ActiveReplica reads the peering object. (Conditions are applied, never read first.)
    "get_cluster_custom_object": [("mountwarden.io", "storageprofiles", "get"),
                                  ("kopf.dev", "clusterkopfpeerings", "get", PEERING_NAME)],
    "patch_cluster_custom_object_status": [("mountwarden.io", "storageprofiles/status", "patch")],
    # The inventory lists the NetworkFileSystems it wrote (and `mountwarden inventory`, with the user's credentials,
    # the profiles too: kopf lists those already).
    "list_cluster_custom_object": [("mountwarden.io", "networkfilesystems", "list"),
                                   ("mountwarden.io", "storageprofiles", "list")],
    # The inventory's NetworkFileSystems (the cluster-scoped calls); PolicyReports, only with policyReports.enabled
    # (POLICY_REPORT_CALLS); discovery needs no role.
    "get_api_resources": [],
    "create_namespaced_custom_object": [],
    "create_cluster_custom_object": [("mountwarden.io", "networkfilesystems", "create")],
    "patch_namespaced_custom_object": [],
    "patch_cluster_custom_object": [("mountwarden.io", "networkfilesystems", "patch")],
    "delete_namespaced_custom_object": [],
    "delete_cluster_custom_object": [("mountwarden.io", "networkfilesystems", "delete")],
}
# The requests sent by path (mountwarden.adapters.rest.Rest), by (apiVersion, resource, verb): rest_calls() reads
# them from the source.
REST_CALLS = {
    ("storage.k8s.io/v1", "storageclasses", "list"): [("storage.k8s.io", "storageclasses", "list")],
    ("storage.k8s.io/v1", "storageclasses", "create"): [("storage.k8s.io", "storageclasses", "create")],
    ("storage.k8s.io/v1", "storageclasses", "patch"): [("storage.k8s.io", "storageclasses", "patch")],
    ("storage.k8s.io/v1", "storageclasses", "delete"): [("storage.k8s.io", "storageclasses", "delete")],
    # adapters/watches.py: PVs, claims and pods listed in pages and watched (rollouts also list PVs).
    ("v1", "persistentvolumes", "list"): [("", "persistentvolumes", "list")],
    ("v1", "persistentvolumes", "watch"): [("", "persistentvolumes", "watch")],
    ("v1", "persistentvolumeclaims", "list"): [("", "persistentvolumeclaims", "list")],
    ("v1", "persistentvolumeclaims", "watch"): [("", "persistentvolumeclaims", "watch")],
    ("v1", "persistentvolumes", "patch"): [("", "persistentvolumes", "patch")],
    ("v1", "pods", "list"): [("", "pods", "list")],
    ("v1", "pods", "watch"): [("", "pods", "watch")],
    # A rollout evicts a replica so that it remounts (never a delete: PodDisruptionBudgets hold), and reads the
    # budgets first.
    ("v1", "pods/eviction", "create"): [("", "pods/eviction", "create")],
    ("policy/v1", "poddisruptionbudgets", "list"): [("policy", "poddisruptionbudgets", "list")],
    ("v1", "pods", "patch"): [("", "pods", "patch", None, NAMESPACE)],  # its own pod's active label
    ("v1", "events", "create"): [("", "events", "create")],  # Warnings on Nodes (kopf posts Events too)
    ("apps/v1", "deployments", "list"): [("apps", "deployments", "list")],
    ("apps/v1", "statefulsets", "list"): [("apps", "statefulsets", "list")],
    ("apps/v1", "daemonsets", "list"): [("apps", "daemonsets", "list")],
    ("apps/v1", "deployments", "patch"): [("apps", "deployments", "patch")],
    ("apps/v1", "statefulsets", "patch"): [("apps", "statefulsets", "patch")],
    ("apps/v1", "daemonsets", "patch"): [("apps", "daemonsets", "patch")],
    ("apps/v1", "replicasets", "list"): [("apps", "replicasets", "list")],
    ("batch/v1", "jobs", "list"): [("batch", "jobs", "list")],
    ("autoscaling/v2", "horizontalpodautoscalers", "list"): [("autoscaling", "horizontalpodautoscalers", "list")],
    ("mountwarden.io/v1alpha1", "nodemountreports", "list"): [("mountwarden.io", "nodemountreports", "list")],
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "patch"): [
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch", ENFORCE_NAME)],
    # Only in local mode (a stopped operator withdraws the configuration it registered): never in a cluster.
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "delete"): [],
}
#: Paths a Rest call is handed that the source does not spell out: the expression -> (apiVersion, resource, named).
REST_PATHS = {
    "self.path": [("v1", "pods", False), ("v1", "persistentvolumes", False),  # watches.ReducedWatch, of CoreWatches
                  ("v1", "persistentvolumeclaims", False)],
    "self._path()": [("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", True)],  # the registrar
}
#: Rest's methods, and the verb of each (get and raw("GET", ...): get when the path names an object, else list).
REST_VERBS = {"get": "get", "raw": "get", "call": "get", "post": "create", "patch": "patch", "delete": "delete",
              "watch": "watch"}
HTTP_VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete"}
REPORTS_NAME = "mountwarden"
#: The report resources of each group policyReports.format may write (mountwarden.core.policyreport.REPORT_APIS).
REPORT_RESOURCES = {"wgpolicyk8s": ("wgpolicyk8s.io", ("policyreports", "clusterpolicyreports")),
                    "openreports": ("openreports.io", ("reports", "clusterreports"))}


def policy_report_calls(*formats: str) -> list[tuple]:
    return [(group, resource, verb, *name)
            for group, resources in (REPORT_RESOURCES[format_] for format_ in formats) for resource in resources
            for verb, *name in (("list",), ("create",), ("patch", REPORTS_NAME), ("delete", REPORTS_NAME))]


POLICY_REPORT_CALLS = policy_report_calls(*REPORT_RESOURCES)
# What kopf itself calls: peering, discovery of CRDs, Events. Watched resources come from its registry.
KOPF_CALLS = [
    ("kopf.dev", "clusterkopfpeerings", "list"), ("kopf.dev", "clusterkopfpeerings", "watch"),
    ("kopf.dev", "clusterkopfpeerings", "patch", PEERING_NAME),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("", "events", "create"),
]
CALL = re.compile(r"\.(?:api|core|apps|batch|autoscaling|policy|custom)\.((?:list|read|get|create|patch|replace|delete)_\w+)")


def operator_sources() -> list[tuple[Path, str]]:
    """The operator's handlers and adapters: (file, module name)."""
    return [(file, f"mountwarden.{package}.{file.stem}") for package in ("handlers", "adapters")
            for file in sorted((ROOT / "operator/mountwarden" / package).glob("*.py"))]


def client_calls() -> set[str]:
    return {name for file, _ in operator_sources() for name in CALL.findall(file.read_text())}


def _rest_targets(where: ast.expr, module_globals: dict) -> list[tuple[str, str, bool]]:
    """(apiVersion, resource, names an object) of each path ``where`` may be, evaluated in its module's globals."""
    text = ast.unparse(where)
    if text in REST_PATHS:
        return REST_PATHS[text]
    assert isinstance(where, ast.Call) and ast.unparse(where.func) == "path", \
        f"a Rest call on {text}: say in REST_PATHS which paths it may be"
    subresource = next((eval(ast.unparse(k.value), module_globals) for k in where.keywords  # noqa: S307
                        if k.arg == "subresource"), None)
    first, *rest = where.args
    if isinstance(first, ast.Starred):  # path(*STORAGE_CLASSES, ...) or path(*KINDS[kind], ...): every value
        starred = first.value
        pairs = ([eval(ast.unparse(starred), module_globals)] if not isinstance(starred, ast.Subscript)  # noqa: S307
                 else list(eval(ast.unparse(starred.value), module_globals).values()))  # noqa: S307
        named = bool(rest)
    else:
        pairs = [(eval(ast.unparse(first), module_globals), eval(ast.unparse(rest[0]), module_globals))]  # noqa: S307
        named = len(rest) > 1
    return [(version, f"{resource}/{subresource}" if subresource else resource, named) for version, resource in pairs]


def rest_calls() -> set[tuple[str, str, str]]:
    """(apiVersion, resource, verb) of every request the operator sends through a Rest (self.rest.get(path(...)))."""
    import importlib

    found = set()
    for file, module in operator_sources():
        module_globals = vars(importlib.import_module(module))
        for node in ast.walk(ast.parse(file.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in REST_VERBS):
                continue
            receiver = node.func.value
            if not ((isinstance(receiver, ast.Attribute) and receiver.attr == "rest")
                    or (isinstance(receiver, ast.Call) and ast.unparse(receiver.func) == "Rest")):
                continue
            method = node.func.attr
            verb = REST_VERBS[method]
            if method in ("raw", "call"):
                verb = HTTP_VERBS[node.args[0].value]
            where = node.args[1] if method in ("raw", "call", "watch") else node.args[0]
            for version, resource, named in _rest_targets(where, module_globals):
                found.add((version, resource, "list" if verb == "get" and not named else verb))
    return found


def kopf_needs() -> list[tuple]:
    """list and watch for every resource kopf watches; patch (finalizer, annotations, status) where it reconciles."""
    import mountwarden.handlers.runner as runner
    from mountwarden.handlers.config import OperatorConfig

    registry = runner.register_handlers(OperatorConfig())
    needs = []
    for handlers in (registry._indexing, registry._watching, registry._changing, registry._spawning):
        for handler in handlers.get_all_handlers():
            group = handler.selector.group or ""
            needs += [(group, handler.selector.any_name, "list"), (group, handler.selector.any_name, "watch")]
            if handlers in (registry._changing, registry._spawning):
                needs += [(group, handler.selector.any_name, "patch"),
                          (group, f"{handler.selector.any_name}/status", "patch")]
    return needs


def needs(*report_formats: str) -> list[tuple]:
    """What the operator calls; with the report groups it writes (REPORT_RESOURCES' keys), their calls too."""
    return [*KOPF_CALLS, *kopf_needs(), *(need for name in client_calls() for need in CLIENT_CALLS[name]),
            *(need for call in rest_calls() for need in REST_CALLS[call]),
            *policy_report_calls(*report_formats)]


def allows(roles: list[dict], group: str, resource: str, verb: str, name: str | None = None,
           namespace: str | None = None) -> bool:
    for role in roles:
        if role["kind"] == "Role" and role["metadata"]["namespace"] != namespace:
            continue
        for rule in role["rules"]:
            if (group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
                    and verb in rule.get("verbs", [])
                    and (not rule.get("resourceNames") or (name is not None and name in rule["resourceNames"]))):
                return True
    return False


def operator_roles(docs: list[dict]) -> list[dict]:
    return [find(docs, "ClusterRole", f"{FULLNAME}-operator"), find(docs, "Role", f"{FULLNAME}-operator")]


def test_every_client_call_of_the_operator_is_known_here():
    unknown = client_calls() - set(CLIENT_CALLS)
    assert not unknown, f"new Kubernetes API calls: say in CLIENT_CALLS what RBAC they need: {sorted(unknown)}"
    unknown_requests = rest_calls() - set(REST_CALLS)
    assert not unknown_requests, f"new requests by path: say in REST_CALLS what RBAC they need: {sorted(unknown_requests)}"


def test_every_request_by_path_is_found_where_the_operator_sends_it():
    # The scan's own check: the requests it reads from the source, one of each way of naming a path.
    found = rest_calls()
    assert {("v1", "pods", "watch"), ("v1", "persistentvolumeclaims", "list"),  # ReducedWatch's self.path
            ("storage.k8s.io/v1", "storageclasses", "delete"),  # path(*STORAGE_CLASSES, name)
            ("apps/v1", "daemonsets", "patch"), ("policy/v1", "poddisruptionbudgets", "list"),  # *RESTARTED, *KINDS
            ("v1", "pods/eviction", "create"),  # a subresource
            ("mountwarden.io/v1alpha1", "nodemountreports", "list"),  # f"{GROUP}/{VERSION}"
            ("v1", "events", "create")} <= found  # Rest(client).post(...)
    # Only the kinds a rollout restarts are patched, none it only reads.
    assert ("apps/v1", "replicasets", "patch") not in found and ("batch/v1", "jobs", "patch") not in found
    assert set(REST_CALLS) == found, "REST_CALLS names requests the operator no longer sends"


def test_the_operator_may_make_every_call_it_makes(default):
    roles = operator_roles(default)
    missing = [need for need in needs() if not allows(roles, *need)]
    assert not missing, f"the operator's roles lack: {missing}"


def test_the_operator_is_granted_nothing_it_does_not_call(default):
    wanted = {(group, resource, verb) for group, resource, verb, *_ in needs()}
    granted = {(group, resource, verb)
               for role in operator_roles(default) for rule in role["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted - wanted == set()


def test_policy_reports_are_opt_in_with_their_flag_and_exactly_their_rbac(default, render):
    assert "--policy-reports" not in container(find(default, "Deployment"))["args"]
    assert not any(allows(operator_roles(default), *need) for need in POLICY_REPORT_CALLS)
    from mountwarden.cli import app
    from mountwarden.core.policyreport import ReportFormat

    # auto may write whichever group is served, so it is granted both; a named format, its own group only.
    for report_format, groups in (("auto", ("wgpolicyk8s", "openreports")), ("both", ("wgpolicyk8s", "openreports")),
                                  ("wgpolicyk8s", ("wgpolicyk8s",)), ("openreports", ("openreports",))):
        values = ("--set", "policyReports.enabled=true") + (
            ("--set", f"policyReports.format={report_format}") if report_format != "auto" else ())
        docs = render(*values)
        subcommand, *args = container(find(docs, "Deployment"))["args"]
        assert "--policy-reports" in args and f"--report-format={report_format}" in args
        context = typer.main.get_command(app).commands[subcommand].make_context(subcommand, list(args))
        assert context.params["report_format"] == ReportFormat(report_format)
        assert {api.format for api in ReportFormat(report_format).candidates()} == set(groups)
        roles = operator_roles(docs)
        missing = [need for need in needs(*groups) if not allows(roles, *need)]
        assert not missing, f"{report_format}: the operator's roles lack: {missing}"
        for group, resources in REPORT_RESOURCES.values():
            assert not allows(roles, group, resources[0], "delete", "someone-elses")
        wanted = {(group, resource, verb) for group, resource, verb, *_ in needs(*groups)}
        granted = {(group, resource, verb) for role in roles for rule in role["rules"]
                   for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
        assert granted - wanted == set(), f"{report_format}: granted beyond its groups"


def test_the_baseline_is_on_by_default_and_its_value_turns_it_off(default, render):
    from mountwarden.cli import app

    assert "--no-baseline" not in container(find(default, "Deployment"))["args"]
    subcommand, *args = container(find(render("--set", "baseline.enabled=false"), "Deployment"))["args"]
    assert "--no-baseline" in args
    context = typer.main.get_command(app).commands[subcommand].make_context(subcommand, list(args))
    assert context.params["baseline"] is False


def test_no_role_has_wildcards_secrets_or_exec(default):
    roles = [d for d in default if d["kind"] in ("ClusterRole", "Role")]
    assert roles and all(role["rules"] for role in roles)
    for role in roles:
        for rule in role["rules"]:
            words = [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
            assert "*" not in words, (role["metadata"]["name"], rule)
            assert not {"secrets", "pods/exec", "pods/attach", "serviceaccounts/token"} & set(rule["resources"])
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_patching_pods_is_limited_to_the_release_namespace(default):
    roles = operator_roles(default)
    assert allows(roles, "", "pods", "patch", namespace=NAMESPACE)
    assert not allows(roles, "", "pods", "patch", namespace="default")


def test_the_agent_reads_its_node_and_its_pods_and_writes_reports_nothing_else(default):
    role = find(default, "ClusterRole", f"{FULLNAME}-agent")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        # mountwarden.agent.pods: its node's pods (field selector spec.nodeName) and their claims' volumes.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]},
        {"apiGroups": ["mountwarden.io"], "resources": ["nodemountreports"], "verbs": ["get", "create", "update"]},
    ]
    binding = find(default, "ClusterRoleBinding", f"{FULLNAME}-agent")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{FULLNAME}-agent", "namespace": NAMESPACE}]
    assert not [d for d in default if d["kind"] == "RoleBinding" and d["subjects"][0]["name"].endswith("-agent")]


# -- what the API server enforces beyond RBAC (admission-policies.yaml) ------------------------------------------
# The policies' expressions are checked by the API server itself: tests/integration/test_enforced_rights.py applies
# them and shows each forbidden change refused, each intended one allowed. Here: what they match, and whom.

#: Each policy: the account it binds, and the (API group, resource) writes it narrows.
POLICY_SCOPE = {
    "operator-workloads": ("operator", {("apps", "deployments"), ("apps", "statefulsets"), ("apps", "daemonsets")}),
    "operator-volumes": ("operator", {("", "persistentvolumes")}),
    "operator-pods": ("operator", {("", "pods")}),
    "operator-enforce": ("operator", {("admissionregistration.k8s.io", "validatingwebhookconfigurations")}),
    "agent-reports": ("agent", {("mountwarden.io", "nodemountreports")}),
}


def policy_scope(policy: dict) -> set[tuple[str, str]]:
    return {(group, resource) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}


def test_each_policy_binds_one_account_everywhere_and_fails_closed(default):
    usernames = {"operator": OPERATOR_USERNAME, "agent": AGENT_USERNAME}
    assert sorted(POLICY_SCOPE) == sorted(ADMISSION_POLICIES)
    for suffix, (account, scope) in POLICY_SCOPE.items():
        policy = find(default, "ValidatingAdmissionPolicy", f"{FULLNAME}-{suffix}")
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["matchConditions"] == [
            {"name": account, "expression": f'request.userInfo.username == "{usernames[account]}"'}]
        assert policy_scope(policy) == scope
        # Every operation: a create or a delete (which RBAC refuses today) would be refused by the policy too.
        assert all(rule["operations"] == ["*"] for rule in policy["spec"]["matchConstraints"]["resourceRules"])
        assert all(v.get("message") or v.get("messageExpression") for v in policy["spec"]["validations"])
        binding = find(default, "ValidatingAdmissionPolicyBinding", f"{FULLNAME}-{suffix}")
        # No matchResources: every namespace, kube-system included.
        assert binding["spec"] == {"policyName": f"{FULLNAME}-{suffix}", "validationActions": ["Deny"]}


def test_every_write_on_objects_mountwarden_does_not_own_is_narrowed_by_a_policy(default):
    """RBAC grants a verb on a resource; the policies narrow it to a field. Whatever the two accounts may write
    that is not mountwarden's own (its CRs, classes, peering, Events, reports) is covered."""
    owned = {("mountwarden.io", r) for r in ("storageprofiles", "storageprofiles/status", "networkfilesystems")} | {
        ("storage.k8s.io", "storageclasses"), ("kopf.dev", "clusterkopfpeerings"), ("", "events"),
        ("", "pods/eviction"),  # an eviction changes no object: PodDisruptionBudgets decide
        ("wgpolicyk8s.io", "policyreports"), ("wgpolicyk8s.io", "clusterpolicyreports"),
        ("openreports.io", "reports"), ("openreports.io", "clusterreports")}
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    for account in ("operator", "agent"):
        written = {(group, resource)
                   for role in default if role["kind"] in ("ClusterRole", "Role")
                   and role["metadata"]["name"] == f"{FULLNAME}-{account}"
                   for rule in role["rules"] if writes & set(rule["verbs"])
                   for group in rule["apiGroups"] for resource in rule["resources"]}
        narrowed = set().union(*(scope for holder, scope in POLICY_SCOPE.values() if holder == account))
        assert written - owned == narrowed, account


def test_the_policies_name_the_release_namespace_its_accounts_and_its_webhook_service(render):
    docs = render(release="storage", namespace="infra")
    fullname = "storage-mountwarden"
    for suffix in ADMISSION_POLICIES:
        policy = find(docs, "ValidatingAdmissionPolicy", f"{fullname}-{suffix}")
        (condition,) = policy["spec"]["matchConditions"]
        assert f'"system:serviceaccount:infra:{fullname}-{suffix.split("-")[0]}"' in condition["expression"]
        assert find(docs, "ValidatingAdmissionPolicyBinding", f"{fullname}-{suffix}")["spec"]["policyName"] == (
            f"{fullname}-{suffix}")
    enforce = " ".join(v["expression"] for v in find(
        docs, "ValidatingAdmissionPolicy", f"{fullname}-operator-enforce")["spec"]["validations"])
    assert f'request.name == "{fullname}-enforce"' in enforce
    assert 'w.clientConfig.service.namespace == "infra"' in enforce
    assert f'w.clientConfig.service.name == "{fullname}-webhook"' in enforce
    assert '["kube-system","infra"].all(n, n in e.values)' in enforce


# -- metrics, ServiceMonitors, dashboard ------------------------------------------------------------------------


def test_metrics_services_and_optional_service_monitors(default, render):
    for component, port in (("operator", 9800), ("agent", 9801)):
        service = find(default, "Service", f"{FULLNAME}-{component}-metrics")
        assert service["spec"]["ports"][0]["port"] == port
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == component
    assert not [d for d in default if d["kind"] in ("ServiceMonitor", "ConfigMap")]
    docs = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom",
                  "--set", "metrics.serviceMonitor.interval=1m")
    for component in ("operator", "agent"):
        monitor = find(docs, "ServiceMonitor", f"{FULLNAME}-{component}")
        assert monitor["metadata"]["labels"]["release"] == "prom"
        # honorLabels: a series' own namespace label (its pod's, which alerts name) is kept, not the target's.
        assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "1m",
                                                 "honorLabels": True}]
        service = find(docs, "Service", f"{FULLNAME}-{component}-metrics")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


def test_the_dashboard_ships_in_a_configmap_for_grafanas_sidecar(render):
    configmap = find(render("--set", "dashboard.enabled=true"), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["mountwarden.json"]) == json.loads(
        (CHART / "dashboards" / "mountwarden.json").read_text())
