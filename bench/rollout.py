"""Benchmark: roll a profile change out to N Deployments x R replicas on kwok, and measure the orchestration.

    python bench/rollout.py [--kubeconfig K] [--deployments 20] [--replicas 3] [--interval 5]

Without --kubeconfig it starts its own local control plane (mountwarden.devcluster) and stops it
afterwards. It runs the operator as users do (`mountwarden operator`, a separate process) with
every HTTP request it makes counted at the transport (urllib3 for the handlers' client, aiohttp
for kopf's own), runs tests/nodesim.py in a thread to stand in for the node agents, changes the
profile from staging to cached, and waits for the rollout to complete.

Figures, in bench/results/rollout.json:
- rollout_overhead_ratio: the rollout's wall time divided by the sum of the Deployments' own
  rollout times (from the template change to updated = available = replicas, as watched). 1.0
  would mean mountwarden adds nothing to restarting them back to back;
- api_requests: the requests the operator made between the change and the completed rollout
  (watch streams opened before the change are not counted), also by verb and resource.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUP, VERSION = "mountwarden.io", "v1alpha1"
#: Names of this run's namespace, profile and PV prefix: unique, so that runs on one cluster never collide.
NAMESPACE = PROFILE = f"bench-rollout-{os.getpid()}"
COUNTING_FLAG = "--counting-operator"


# -- the operator, with its requests counted ---------------------------------------------------


def _resource(method: str, url: str) -> str:
    """'GET pods', 'PATCH deployments', 'WATCH storageprofiles', 'PATCH storageprofiles/status'."""
    path, _, query = url.partition("?")
    parts = path.split("://", 1)[-1].split("/", 1)[-1].strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    verb = "WATCH" if "watch=true" in query or "watch=1" in query else method.upper()
    return f"{verb} {rest[0] if rest else path}{'/' + rest[2] if len(rest) > 2 else ''}"


def counting_operator(counts_path: str, argv: list[str]) -> None:
    """Run `mountwarden operator` in this process, counting every request; SIGUSR1 writes the counts."""
    import aiohttp
    import urllib3.connectionpool

    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(method: str, url: str) -> None:
        with lock:
            counts[_resource(method, url)] += 1

    urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def counted_urlopen(self, method, url, *args, **kwargs):
        count(method, url)
        return urlopen(self, method, url, *args, **kwargs)

    request = aiohttp.ClientSession._request

    def counted_request(self, method, url, *args, **kwargs):
        count(method, str(url))
        return request(self, method, url, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = counted_urlopen
    aiohttp.ClientSession._request = counted_request

    def dump(*_) -> None:
        with lock:
            Path(counts_path).write_text(json.dumps(dict(counts)))

    signal.signal(signal.SIGUSR1, dump)
    from mountwarden.cli import main

    sys.argv = ["mountwarden", "operator", *argv]
    main()


class Operator:
    def __init__(self, kubeconfig: str, interval: float, workdir: Path,
                 extra_args: tuple[str, ...] = ("--webhook-mode", "off")) -> None:
        self.counts_path = workdir / "counts.json"
        self.log = (workdir / "operator.log").open("w")
        env = {**os.environ, "MOUNTWARDEN_ROLLOUT_INTERVAL": str(interval),
               "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT)])}
        self.process = subprocess.Popen(
            [sys.executable, __file__, COUNTING_FLAG, str(self.counts_path), "--kubeconfig", kubeconfig,
             *extra_args, "--metrics-port", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )

    def counts(self) -> Counter[str]:
        self.counts_path.unlink(missing_ok=True)
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not self.counts_path.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"the operator did not report its requests; see {self.log.name}")
            time.sleep(0.05)
        time.sleep(0.05)  # written in one call, but let it finish
        return Counter(json.loads(self.counts_path.read_text()))

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()


# -- the workload ------------------------------------------------------------------------------


def profile(cache_policy: str) -> dict:
    # An NFS backend without an EFS file system: no credit watch, so no AWS call during the run.
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "StorageProfile", "metadata": {"name": PROFILE},
        "spec": {"backend": {"provisioner": "nfs.csi.k8s.io", "parameters": {"server": "nfs.bench", "share": "/"}},
                 "cachePolicy": cache_policy,
                 "rollout": {"strategy": "PatchBoundVolumes", "approval": "Automatic"}},
    }


def wait(condition, what: str, timeout: float = 300.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def install_crds(api) -> None:
    import kubernetes
    import yaml

    extensions = kubernetes.client.ApiextensionsV1Api(api)
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        try:
            extensions.create_custom_resource_definition(body)
        except kubernetes.client.ApiException as error:
            if error.status != 409:
                raise
            current = extensions.read_custom_resource_definition(body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            extensions.replace_custom_resource_definition(body["metadata"]["name"], body)
        wait(lambda name=body["metadata"]["name"]: any(
            c.type == "Established" and c.status == "True"
            for c in extensions.read_custom_resource_definition(name).status.conditions or []), f"CRD {path.name}")


def create_workloads(kube, storage_class: str, options: list[str], deployments: int, replicas: int) -> list[str]:
    core, apps = kube
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    wait(lambda: core.list_namespaced_service_account(NAMESPACE).items, "the default ServiceAccount")
    names = [f"app-{index:02d}" for index in range(deployments)]
    for name in names:
        core.create_persistent_volume({
            "metadata": {"name": f"{NAMESPACE}-{name}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                     "mountOptions": options, "nfs": {"server": "nfs.bench", "path": f"/{name}"},
                     "claimRef": {"namespace": NAMESPACE, "name": name}},
        })
        core.create_namespaced_persistent_volume_claim(NAMESPACE, {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                     "volumeName": f"{NAMESPACE}-{name}", "resources": {"requests": {"storage": "1Gi"}}},
        })
        apps.create_namespaced_deployment(NAMESPACE, {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "busybox",
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}],
                         "terminationGracePeriodSeconds": 0}}},
        })
    wait(lambda: all(complete(d) for d in apps.list_namespaced_deployment(NAMESPACE).items), "the Deployments")
    return names


def cleanup(core, custom) -> None:
    """Leave an existing cluster as it was: the namespace, the PVs and the profile go."""
    import kubernetes

    core.delete_namespace(NAMESPACE)
    for pv in core.list_persistent_volume().items:
        if pv.metadata.name.startswith(f"{NAMESPACE}-"):
            core.delete_persistent_volume(pv.metadata.name)
    try:
        custom.delete_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise


def complete(deployment) -> bool:
    status, want = deployment.status, deployment.spec.replicas
    return ((status.observed_generation or 0) >= deployment.metadata.generation
            and (status.updated_replicas or 0) == want and (status.replicas or 0) == want
            and (status.available_replicas or 0) == want)


class RolloutClock:
    """Watches the Deployments: when each one's template changed and when its own rollout completed."""

    def __init__(self, api_client) -> None:
        import kubernetes

        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.watch = kubernetes.watch.Watch()
        self.initial = {d.metadata.name: d.metadata.generation
                        for d in self.apps.list_namespaced_deployment(NAMESPACE).items}
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import urllib3

        try:
            for event in self.watch.stream(self.apps.list_namespaced_deployment, NAMESPACE, timeout_seconds=3600):
                deployment, now = event["object"], time.monotonic()
                name = deployment.metadata.name
                if deployment.metadata.generation > self.initial.get(name, 0):
                    self.started.setdefault(name, now)
                    if complete(deployment) and name not in self.finished:
                        self.finished[name] = now
        except urllib3.exceptions.ProtocolError:
            if not self.stopped:
                raise  # the stream only ends early when stop() closes it

    def stop(self) -> None:
        self.stopped = True
        self.watch.stop()

    def own_seconds(self) -> dict[str, float]:
        return {name: self.finished[name] - self.started[name] for name in self.finished}


def run(args: argparse.Namespace, kubeconfig: str, workdir: Path) -> dict:
    import kubernetes
    from tests.nodesim import NodeSimulator

    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    core, apps = kubernetes.client.CoreV1Api(api), kubernetes.client.AppsV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    install_crds(api)
    nodes = [node.metadata.name for node in core.list_node().items]
    simulator = NodeSimulator(kubernetes.config.new_client_from_config(config_file=kubeconfig), nodes)
    operator = Operator(kubeconfig, args.interval, workdir)
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", profile("staging"))

        def status() -> dict:
            return custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE).get("status") or {}

        first = wait(lambda: status() if status().get("version") == 1 else None, "the profile's v1", timeout=120)
        create_workloads((core, apps), first["storageClassName"], first["effectiveMountOptions"],
                         args.deployments, args.replicas)
        simulator.start()
        wait(lambda: all(r["spec"]["volumes"] for r in custom.list_cluster_custom_object(
            GROUP, VERSION, "nodemountreports")["items"]), "the node reports")
        clock = RolloutClock(api)
        before = operator.counts()

        started = time.monotonic()
        custom.patch_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE,
                                           {"spec": profile("cached")["spec"]})
        rollout = wait(lambda: (status().get("rollout") or {}) if (status().get("rollout") or {}).get(
            "phase") == "Complete" and status()["rollout"]["targetVersion"] == 2 else None,
                       "the rollout", timeout=args.timeout)
        total = time.monotonic() - started
        requests = operator.counts() - before
        own = clock.own_seconds()
        clock.stop()
    finally:
        simulator.stop()
        operator.stop()
        cleanup(core, custom)
    if len(own) != args.deployments:
        raise RuntimeError(f"watched {len(own)} of {args.deployments} Deployment rollouts")
    return {
        "benchmark": "rollout",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "deployments": args.deployments,
        "replicas": args.replicas,
        "rollout_interval_seconds": args.interval,
        "rollout_seconds": round(total, 2),
        "sum_of_deployment_rollout_seconds": round(sum(own.values()), 2),
        "deployment_rollout_seconds": {"min": round(min(own.values()), 2), "max": round(max(own.values()), 2)},
        "rollout_overhead_ratio": round(total / sum(own.values()), 2),
        "api_requests": sum(requests.values()),
        "api_requests_per_deployment": round(sum(requests.values()) / args.deployments, 1),
        "api_requests_by_kind": dict(sorted(requests.items(), key=lambda item: (-item[1], item[0]))),
        "remounted_pods": sum(w.get("remounts", 0) for w in rollout["workloads"]),
        "simulator_errors": [str(error) for error in simulator.errors],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="An existing cluster with kwok nodes; default: start a local one.")
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--interval", type=float, default=5.0, help="The operator's --rollout-interval (MOUNTWARDEN_ROLLOUT_INTERVAL).")
    parser.add_argument("--timeout", type=float, default=1800.0, help="Give up on the rollout after this long.")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "rollout.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mountwarden-bench-") as scratch:
        workdir = Path(scratch)
        if args.kubeconfig:
            results = run(args, args.kubeconfig, workdir)
        else:
            from mountwarden.devcluster import local_cluster

            with local_cluster(workdir / "cluster", nodes=3) as info:
                results = run(args, str(info.kubeconfig), workdir)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    if sys.argv[1:2] == [COUNTING_FLAG]:
        counting_operator(sys.argv[2], sys.argv[3:])
    else:
        main()
