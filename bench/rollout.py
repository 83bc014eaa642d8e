"""Benchmark: a mount-option change rolled out to N Deployments x R replicas, by mountwarden and by hand.

    python bench/rollout.py [--kubeconfig K] [--deployments 20] [--replicas 3] [--rounds 2]

Without --kubeconfig it starts its own local control plane (mountwarden.devcluster) and stops it
afterwards. Two sets of N Deployments mount NFS PVs in two namespaces, on the same kwok nodes, in
the same run:

- mountwarden's: their PVs are of a profile's class; the profile changes (staging <-> cached) and
  the operator, run as users run it (`mountwarden operator`, a separate process, every HTTP request
  it makes counted at the transport: urllib3 for the handlers' client, aiohttp for kopf's own),
  patches each Deployment's PVs at its turn and restarts it, verifies its replicas on their nodes'
  reports, until the rollout's phase is Complete;
- the runbook's: their PVs belong to no profile, and bench/runbook.sh does what a careful person
  does by hand: kubectl patch each PV, then per Deployment kubectl rollout restart, kubectl
  rollout status, and wait until the node reports show every new replica with the new options.

tests/nodesim.py stands in for the kubelets, kernels and node agents of both (a thread mounting
each started pod's volume as the kernel lab measured it and running the agent's own code on each
node's simulated /proc). Each round changes both sets' options once, mountwarden and the runbook
taking turns to go first; the figures sum the rounds.

Figures, in bench/results/rollout.json:
- rollout_overhead_ratio: mountwarden's wall time divided by the runbook's (<= 1.2 is the goal);
- own_rollout_ratio: mountwarden's wall time divided by the sum of its Deployments' own rollouts
  (template change to updated = available = replicas, as watched): what orchestrating costs over
  restarting them back to back with nothing verified;
- api_requests: the requests the operator made during its rollouts (watch streams opened before
  are not counted), also by verb and resource.
"""

import argparse
import atexit
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

from tests.support import profile_body, wait_for  # noqa: E402

GROUP, VERSION = "mountwarden.io", "v1alpha1"
#: Names of this run's namespace, profile and PV prefix: unique, so that runs on one cluster never collide.
NAMESPACE = PROFILE = f"bench-rollout-{os.getpid()}"
COUNTING_FLAG = "--counting-operator"
#: A file to write the operator's memory profile to (bench/memprofile.py); slows the operator down.
MEMPROFILE_ENV = "MOUNTWARDEN_BENCH_MEMPROFILE"
#: A file for a CPU profile of the operator's main thread (pyinstrument), from SIGUSR2 to the next SIGUSR1.
CPUPROFILE_ENV = "MOUNTWARDEN_BENCH_CPUPROFILE"
#: A file for a per-request trace of the webhook (bench/webhooktrace.py), from SIGUSR2 to the next SIGUSR1.
TRACE_ENV = "MOUNTWARDEN_BENCH_WEBHOOK_TRACE"


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

    profile_path = os.environ.get(MEMPROFILE_ENV)
    profile = None
    if profile_path:
        from bench.memprofile import PeakProfile

        profile = PeakProfile()
        atexit.register(lambda: profile.write(Path(profile_path)))

    cpu_path = os.environ.get(CPUPROFILE_ENV)
    cpu: dict = {}

    def start_cpu_profile(*_) -> None:
        from pyinstrument import Profiler

        cpu["profiler"] = Profiler(interval=0.0005, async_mode="disabled")
        cpu["profiler"].start()

    trace_path = os.environ.get(TRACE_ENV)
    trace = None
    if trace_path:
        from bench.webhooktrace import WebhookTrace

        trace = WebhookTrace()
        trace.install()

    def start_profiles(*_) -> None:
        if cpu_path:
            start_cpu_profile()
        if trace is not None:
            trace.start()

    if cpu_path or trace_path:
        signal.signal(signal.SIGUSR2, start_profiles)

    def dump(*_) -> None:
        with lock:  # written whole, then renamed: the bench may read it at any moment
            partial = Path(f"{counts_path}.partial")
            partial.write_text(json.dumps(dict(counts)))
            partial.replace(counts_path)
        if profile is not None:
            profile.write(Path(profile_path))
        if cpu.get("profiler") is not None:
            profiler = cpu.pop("profiler")
            profiler.stop()
            Path(cpu_path).write_text(profiler.output_text(unicode=False, color=False, show_all=True))
        if trace is not None and trace.recording:
            trace.write(Path(trace_path))

    signal.signal(signal.SIGUSR1, dump)
    from mountwarden.cli import main

    sys.argv = ["mountwarden", "operator", *argv]
    main()


class Operator:
    def __init__(self, kubeconfig: str, interval: float, workdir: Path,
                 extra_args: tuple[str, ...] = ("--webhook-mode", "off")) -> None:
        self.counts_path = workdir / "counts.json"
        self.profiling = bool(os.environ.get(CPUPROFILE_ENV) or os.environ.get(TRACE_ENV))
        self.log = (workdir / "operator.log").open("w")
        env = {**os.environ, "MOUNTWARDEN_ROLLOUT_INTERVAL": str(interval),
               "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT)])}
        self.process = subprocess.Popen(
            [sys.executable, __file__, COUNTING_FLAG, str(self.counts_path), "--kubeconfig", kubeconfig,
             *extra_args, "--metrics-port", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )

    def start_profiles(self) -> None:
        """With $MOUNTWARDEN_BENCH_CPUPROFILE or _WEBHOOK_TRACE: profile from now until the next counts(); else nothing."""
        if self.profiling:
            self.process.send_signal(signal.SIGUSR2)  # without the variable no handler is set: it would kill

    def counts(self) -> Counter[str]:
        self.counts_path.unlink(missing_ok=True)
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not self.counts_path.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"the operator did not report its requests; see {self.log.name}")
            time.sleep(0.05)
        return Counter(json.loads(self.counts_path.read_text()))

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()


# -- the workloads -----------------------------------------------------------------------------


#: Namespaces of the two sets; the runbook's PVs carry a class no profile governs.
MOUNTWARDEN_NAMESPACE = f"{NAMESPACE}-mountwarden"
RUNBOOK_NAMESPACE = f"{NAMESPACE}-runbook"
RUNBOOK_CLASS = f"{NAMESPACE}-by-hand"
RUNBOOK = ROOT / "bench" / "runbook.sh"


def profile(cache_policy: str) -> dict:
    # An NFS backend without an EFS file system: no credit watch, so no AWS call during the run.
    return profile_body(PROFILE, cache_policy, provisioner="nfs.csi.k8s.io",
                        parameters={"server": "nfs.bench", "share": "/"},
                        rollout={"strategy": "PatchBoundVolumes", "approval": "Automatic"})


def options_of(cache_policy: str) -> tuple[list[str], list[str]]:
    """(the mountOptions of the profile's class for ``cache_policy``, their canonical tokens, which a node's
    report of a volume mounted with them lists among the options in effect)."""
    from mountwarden.api.storageprofile import StorageProfileSpec, desired_class
    from mountwarden.core.options.normalize import normalize

    spec = StorageProfileSpec.model_validate(profile(cache_policy)["spec"])
    declared = list(desired_class(spec, spec.resolve()).mount_options)
    return declared, list(normalize(declared).mount_options)


def wait(condition, what: str, timeout: float = 300.0, interval: float = 0.2):
    return wait_for(condition, what=what, timeout=timeout, interval=interval)


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


def create_workloads(kube, namespace: str, storage_class: str, options: list[str], deployments: int,
                     replicas: int) -> list[str]:
    """N Deployments of R replicas, each mounting a PV of its own; returns the PV names."""
    core, apps = kube
    core.create_namespace({"metadata": {"name": namespace}})
    wait(lambda: core.list_namespaced_service_account(namespace).items, "the default ServiceAccount")
    volumes = []
    for index in range(deployments):
        name, pv = f"app-{index:02d}", f"{namespace}-app-{index:02d}"
        volumes.append(pv)
        core.create_persistent_volume({
            "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                     "mountOptions": options, "nfs": {"server": "nfs.bench", "path": f"/{namespace}/{name}"},
                     "claimRef": {"namespace": namespace, "name": name}},
        })
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                     "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}},
        })
        apps.create_namespaced_deployment(namespace, {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "busybox",
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}],
                         "terminationGracePeriodSeconds": 0}}},
        })
    wait(lambda: all(complete(d) for d in apps.list_namespaced_deployment(namespace).items),
         f"the Deployments of {namespace}")
    return volumes


def cleanup(core, custom, storage) -> None:
    """Leave an existing cluster as it was: the namespaces, the PVs, the class and the profile go."""
    import kubernetes

    for namespace in (MOUNTWARDEN_NAMESPACE, RUNBOOK_NAMESPACE):
        try:
            core.delete_namespace(namespace)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise
    for pv in core.list_persistent_volume().items:
        if pv.metadata.name.startswith(f"{NAMESPACE}-"):
            core.delete_persistent_volume(pv.metadata.name)
    for delete in (lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE),
                   lambda: storage.delete_storage_class(RUNBOOK_CLASS)):
        try:
            delete()
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise


def complete(deployment) -> bool:
    status, want = deployment.status, deployment.spec.replicas
    return ((status.observed_generation or 0) >= deployment.metadata.generation
            and (status.updated_replicas or 0) == want and (status.replicas or 0) == want
            and (status.available_replicas or 0) == want)


class RolloutClock:
    """Watches a namespace's Deployments: when each one's template changed and when its own rollout completed."""

    def __init__(self, api_client, namespace: str) -> None:
        import kubernetes

        self.namespace = namespace
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.watch = kubernetes.watch.Watch()
        self.initial = {d.metadata.name: d.metadata.generation
                        for d in self.apps.list_namespaced_deployment(namespace).items}
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import urllib3

        try:
            for event in self.watch.stream(self.apps.list_namespaced_deployment, self.namespace,
                                           timeout_seconds=3600):
                deployment, now = event["object"], time.monotonic()
                name = deployment.metadata.name
                if deployment.metadata.generation > self.initial.get(name, 0):
                    self.started.setdefault(name, now)
                    if complete(deployment) and name not in self.finished:
                        self.finished[name] = now
        except urllib3.exceptions.ProtocolError:
            if not self.stopped:
                raise  # the stream only ends early when stop() closes it

    def stop(self) -> dict[str, float]:
        """Each Deployment's own rollout, in seconds."""
        self.stopped = True
        self.watch.stop()
        return {name: self.finished[name] - self.started[name] for name in self.finished}


def by_mountwarden(api, operator: "Operator", cache_policy: str, timeout: float) -> dict:
    """Change the profile and wait for its rollout to complete; the seconds, own rollouts and requests."""
    import kubernetes

    custom = kubernetes.client.CustomObjectsApi(api)

    def status() -> dict:
        return custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE).get("status") or {}

    before_class = status()["storageClassName"]

    def rollout() -> dict:
        # The class with the new options: a new version, or an older one with the same content, reused.
        current = status()
        found = current.get("rollout") or {}
        return found if (current.get("storageClassName") != before_class and found.get("phase") == "Complete"
                         and found.get("targetStorageClassName") == current["storageClassName"]) else {}

    clock = RolloutClock(api, MOUNTWARDEN_NAMESPACE)
    before = operator.counts()
    started = time.monotonic()
    custom.patch_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE,
                                       {"spec": profile(cache_policy)["spec"]})
    done = wait(rollout, f"the rollout to {cache_policy}", timeout=timeout, interval=0.1)
    seconds = time.monotonic() - started
    requests = operator.counts() - before
    own = clock.stop()
    return {"seconds": seconds, "own": own, "requests": requests,
            "remounted_pods": sum(w.get("remounts", 0) for w in done["workloads"])}


def by_runbook(api, kubeconfig: str, cache_policy: str, volumes: list[str], timeout: float) -> dict:
    """Run bench/runbook.sh over the runbook's set; the seconds and own rollouts."""
    declared, effective = options_of(cache_policy)
    clock = RolloutClock(api, RUNBOOK_NAMESPACE)
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    if os.environ.get("MOUNTWARDEN_TESTBIN_DIR"):
        env["PATH"] = os.environ["MOUNTWARDEN_TESTBIN_DIR"] + os.pathsep + env["PATH"]
    started = time.monotonic()
    subprocess.run(["bash", str(RUNBOOK), RUNBOOK_NAMESPACE, ",".join(declared), json.dumps(effective), *volumes],
                   env=env, check=True, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - started
    return {"seconds": seconds, "own": clock.stop()}


def run(args: argparse.Namespace, kubeconfig: str, workdir: Path) -> dict:
    import kubernetes
    from tests.nodesim import NodeSimulator

    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    core, apps = kubernetes.client.CoreV1Api(api), kubernetes.client.AppsV1Api(api)
    custom, storage = kubernetes.client.CustomObjectsApi(api), kubernetes.client.StorageV1Api(api)
    install_crds(api)
    nodes = [node.metadata.name for node in core.list_node().items]
    simulator = NodeSimulator(kubernetes.config.new_client_from_config(config_file=kubeconfig), nodes)
    operator = Operator(kubeconfig, args.interval, workdir)
    rounds: list[dict] = []
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", profile("staging"))
        first = wait(lambda: (s := custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", PROFILE)
                              .get("status") or {}).get("version") == 1 and s, "the profile's v1", timeout=120)
        storage.create_storage_class({"metadata": {"name": RUNBOOK_CLASS}, "provisioner": "nfs.csi.k8s.io"})
        create_workloads((core, apps), MOUNTWARDEN_NAMESPACE, first["storageClassName"],
                         first["effectiveMountOptions"], args.deployments, args.replicas)
        by_hand = create_workloads((core, apps), RUNBOOK_NAMESPACE, RUNBOOK_CLASS, options_of("staging")[0],
                                   args.deployments, args.replicas)
        simulator.start()
        pods = args.deployments * args.replicas * 2
        wait(lambda: sum(len(r["spec"]["volumes"]) for r in custom.list_cluster_custom_object(
            GROUP, VERSION, "nodemountreports")["items"]) >= pods, "the node reports")
        policies = ["cached", "staging"] * args.rounds
        for index, cache_policy in enumerate(policies[:args.rounds]):
            # Alternate who goes first, so that neither always runs on a cluster the other just stirred.
            order = ("runbook", "mountwarden") if index % 2 == 0 else ("mountwarden", "runbook")
            measured = {}
            for who in order:
                if who == "mountwarden":
                    measured[who] = by_mountwarden(api, operator, cache_policy, args.timeout)
                else:
                    measured[who] = by_runbook(api, kubeconfig, cache_policy, by_hand, args.timeout)
            rounds.append({"cache_policy": cache_policy, "first": order[0], **measured})
    finally:
        simulator.stop()
        operator.stop()
        cleanup(core, custom, storage)
    for measured in rounds:
        for who in ("mountwarden", "runbook"):
            if len(measured[who]["own"]) != args.deployments:
                raise RuntimeError(f"watched {len(measured[who]['own'])} of {args.deployments} Deployment rollouts "
                                   f"of the {who}")
    mountwarden = sum(r["mountwarden"]["seconds"] for r in rounds)
    runbook = sum(r["runbook"]["seconds"] for r in rounds)
    own = sum(sum(r["mountwarden"]["own"].values()) for r in rounds)
    requests: Counter[str] = sum((r["mountwarden"]["requests"] for r in rounds), Counter())
    return {
        "benchmark": "rollout",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "deployments": args.deployments,
        "replicas": args.replicas,
        "rounds": args.rounds,
        "rollout_interval_seconds": args.interval,
        "runbook_poll_seconds": float(os.environ.get("RUNBOOK_POLL", "0.5")),
        "mountwarden_seconds": round(mountwarden, 2),
        "runbook_seconds": round(runbook, 2),
        "rollout_overhead_ratio": round(mountwarden / runbook, 3),
        "mountwarden_seconds_per_round": [round(r["mountwarden"]["seconds"], 2) for r in rounds],
        "runbook_seconds_per_round": [round(r["runbook"]["seconds"], 2) for r in rounds],
        "sum_of_deployment_rollout_seconds": round(own, 2),
        "own_rollout_ratio": round(mountwarden / own, 2),
        "api_requests": sum(requests.values()),
        "api_requests_per_deployment": round(sum(requests.values()) / (args.deployments * args.rounds), 1),
        "api_requests_by_kind": dict(sorted(requests.items(), key=lambda item: (-item[1], item[0]))),
        "remounted_pods": sum(r["mountwarden"]["remounted_pods"] for r in rounds),
        "simulator_errors": [str(error) for error in simulator.errors],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="An existing cluster with kwok nodes; default: start a local one.")
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="Option changes per set (mountwarden and the "
                        "runbook take turns to go first).")
    parser.add_argument("--interval", type=float, default=30.0, help="The operator's --rollout-interval "
                        "(MOUNTWARDEN_ROLLOUT_INTERVAL): its safety net, not its pace.")
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
