"""Rollouts on a real control plane: kube-controller-manager rolls the workloads, kwok runs the pods,
and tests/nodesim.py mounts them as the kernel lab measured it and runs the agent's own code on each
node, so each NodeMountReport is what the real agent writes for such a node.

Each test's PVs are paths of one EFS file system of its own: as on a real node, the pods of that
file system on one node share a superblock whenever their options differ only in what the kernel
does not compare (timeo, nconnect...), whichever path they mount, and a superblock lives while any
mount holds it. What is asserted is what a real node does, stuck superblocks included.
"""

import hashlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime

import kubernetes
import kubernetes.watch
import pytest
import yaml
from tests.nodesim import NodeSimulator
from tests.support import GROUP, VERSION, Kube, WaitTimedOut, profile_body, scrape, wait_for

from mountwarden.adapters.kube import TransientApiError
from mountwarden.adapters.workloads import ClusterWorkloads
from mountwarden.core.options.normalize import normalize, with_kernel_defaults
from mountwarden.core.rollout import (
    PatchVolume,
    Policy,
    RestartWorkload,
    Target,
    Version,
    advance,
    build_plan,
)
from mountwarden.handlers.rollouts import ProfileRollout, RolloutWakeups

pytestmark = pytest.mark.cluster

CACHED = ["vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
          "acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600", "lookupcache=all"]
STAGING = ["vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
           "acregmin=0", "acregmax=0", "lookupcache=positive", "cto"]
STAGING_TIMEO_300 = [option if option != "timeo=600" else "timeo=300" for option in STAGING]
AUTOMATIC = {"strategy": "PatchBoundVolumes", "approval": "Automatic"}
PREVIOUS = "mountwarden.io/previous-mount-options"


def recorded(options: list[str]) -> str:
    """mountwarden.io/previous-mount-options as the operator writes it: a JSON array."""
    return json.dumps(options, separators=(",", ":"))
ROLLOUT_TIMEOUT = 180


@pytest.fixture(scope="module")
def rollout_operator(operator):
    """The module's operator, whose rollouts only events move on: its safety net is an hour (tests/support.py)."""
    return operator


@pytest.fixture(scope="module")
def nodes(cluster, crds_installed) -> Iterator[NodeSimulator]:
    simulator = NodeSimulator(cluster.api_client(), list(cluster.node_names))
    simulator.start()
    yield simulator
    simulator.stop()
    assert not simulator.errors, simulator.errors


def prebound_claim(kube: Kube, namespace: str, claim: str, pv: str, storage_class: str, options: list[str], *,
                   server: str, path: str, labels: dict | None = None) -> None:
    """A static PV of ``storage_class`` and its claim, each naming the other, as a provisioner leaves them."""
    kube.core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv, "labels": labels or {}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain", "mountOptions": options,
                 "nfs": {"server": server, "path": path}, "claimRef": {"namespace": namespace, "name": claim}},
    })
    kube.core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })


class Scenario:
    """One test's profile, volumes and workloads; removes the cluster-scoped ones afterwards."""

    def __init__(self, kube: Kube, namespace: str, unique: str, node_names: list[str]) -> None:
        self.kube, self.namespace, self.unique, self.node_names = kube, namespace, unique, node_names
        self.profile = f"roll-{unique}"
        self.volumes: list[str] = []
        #: The test's own EFS file system: other tests' pods never share its superblocks.
        self.server = f"fs-{hashlib.sha256(unique.encode()).hexdigest()[:17]}.efs.us-east-1.amazonaws.com"

    @property
    def v1(self) -> str:
        return f"{self.profile}-v1"

    def apply(self, cache_policy: str, **spec) -> None:
        self.kube.apply_profile(profile_body(self.profile, cache_policy, **spec))

    def start(self, cache_policy: str = "staging", **spec) -> None:
        self.apply(cache_policy, **spec)
        wait_for(lambda: self.status().get("version") == 1, what=f"{self.profile} at v1")

    def status(self) -> dict:
        return (self.kube.profile(self.profile) or {}).get("status") or {}

    def rollout(self) -> dict:
        return self.status().get("rollout") or {}

    def wait_phase(self, phase: str, target: str, timeout: float = ROLLOUT_TIMEOUT) -> dict:
        def reached():
            rollout = self.rollout()
            return rollout if rollout.get("phase") == phase and rollout.get("targetStorageClassName") == target else None
        return wait_for(reached, timeout=timeout, interval=0.5,
                        what=lambda: f"rollout {phase} to {target} (the rollout as it stands: {self.described()})")

    def described(self) -> str:
        """The rollout's phase and each workload's state, reason and message: what a timed-out wait was stuck on."""
        rollout = self.rollout()
        workloads = "; ".join(f"{w.get('kind')}/{w.get('name')} {w.get('state')} {w.get('reason')}: {w.get('message')}"
                              for w in rollout.get("workloads") or [])
        pods = ", ".join(f"{p.metadata.name} {p.status.phase}{' terminating' if p.metadata.deletion_timestamp else ''}"
                         for p in self.kube.core.list_namespaced_pod(self.namespace).items)
        return f"{rollout.get('phase')} to {rollout.get('targetStorageClassName')} [{workloads}]; pods: {pods}"

    def claim(self, name: str, storage_class: str, options: list[str], path: str | None = None) -> str:
        """A PVC bound to a static PV of the class, as if the class had provisioned it."""
        pv = f"pv-{self.unique}-{name}"
        prebound_claim(self.kube, self.namespace, name, pv, storage_class, options, server=self.server,
                       path=path or f"/{self.unique}/{name}", labels={"mountwarden.io/test": self.unique})
        self.volumes.append(pv)
        # A provisioned claim is bound before anything mounts it, and a rollout counts a PV's claim only once the
        # PV is Bound: a cold CI run once applied a profile before the PV controller had bound this one, and the
        # rollout rightly found no consumer of it.
        wait_for(lambda: self.kube.core.read_persistent_volume(pv).status.phase == "Bound"
                 and self.kube.core.read_namespaced_persistent_volume_claim(name, self.namespace).status.phase
                 == "Bound", interval=0.2, what=f"claim {name} bound to {pv}")
        return pv

    def pod_spec(self, claim: str | None, node: str | None = None) -> dict:
        spec: dict = {"containers": [{"name": "app", "image": "busybox",
                                      "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                      "terminationGracePeriodSeconds": 0}
        if claim is not None:
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        if node is not None:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        return spec

    def deployment(self, name: str, claim: str, replicas: int = 3, node: str | None = None) -> None:
        self.kube.apps.create_namespaced_deployment(self.namespace, {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": self.pod_spec(claim, node)}},
        })

    def statefulset(self, name: str, replicas: int = 3) -> None:
        """Its claims come from volumeClaimTemplates: data-<name>-<ordinal>, pre-bound to static PVs."""
        for ordinal in range(replicas):
            self.claim(f"data-{name}-{ordinal}", self.v1, STAGING)
        self.kube.apps.create_namespaced_stateful_set(self.namespace, {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": self.pod_spec(None)},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                         "accessModes": ["ReadWriteMany"], "storageClassName": self.v1,
                         "resources": {"requests": {"storage": "1Gi"}}}}]},
        })

    def bare_pod(self, name: str, claim: str, node: str) -> None:
        """A pod of ``claim`` on ``node`` (``claim`` made it bound). A fresh run once waited 60 s for such a pod's
        mount, created right after its claim; the likeliest cause (not reproduced) is the scheduler, which parks a
        pod whose claim is not bound yet as unschedulable and retries it on an event or after a back-off."""
        self.kube.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name},
                                                              "spec": self.pod_spec(claim, node)})

    def where(self, pod_name: str) -> str:
        """The pod's phase, node and start, for a wait that timed out."""
        pod = self.kube.core.read_namespaced_pod(pod_name, self.namespace)
        return f"pod {pod_name}: {pod.status.phase} on {pod.spec.node_name}, started {pod.status.start_time}"

    def ready(self, kind: str, name: str, replicas: int) -> bool:
        if kind == "Deployment":
            status = self.kube.apps.read_namespaced_deployment_status(name, self.namespace).status
            return (status.available_replicas or 0) == replicas and (status.updated_replicas or 0) == replicas
        status = self.kube.apps.read_namespaced_stateful_set_status(name, self.namespace).status
        return (status.ready_replicas or 0) == replicas

    def wait_ready(self, *workloads: tuple[str, str, int]) -> None:
        for kind, name, replicas in workloads:
            wait_for(lambda k=kind, n=name, r=replicas: self.ready(k, n, r), timeout=90, what=f"{kind} {name} ready")

    def replica_sets(self, deployment: str) -> list:
        return [rs for rs in self.kube.apps.list_namespaced_replica_set(self.namespace).items
                if any(o.name == deployment for o in rs.metadata.owner_references or [])]

    def revisions(self, statefulset: str) -> list:
        return [r for r in self.kube.apps.list_namespaced_controller_revision(self.namespace).items
                if any(o.name == statefulset for o in r.metadata.owner_references or [])]

    def template_annotations(self, kind: str, name: str) -> dict:
        read = (self.kube.apps.read_namespaced_deployment if kind == "Deployment"
                else self.kube.apps.read_namespaced_stateful_set)
        return read(name, self.namespace).spec.template.metadata.annotations or {}

    def pv(self, name: str):
        return self.kube.core.read_persistent_volume(name)

    def pods(self, app: str) -> list:
        return [p for p in self.kube.core.list_namespaced_pod(self.namespace, label_selector=f"app={app}").items
                if p.metadata.deletion_timestamp is None]

    def reported_options(self, pod) -> list[str] | None:
        """What the node report says the pod has mounted (its only volume)."""
        if pod.spec.node_name is None:
            return None  # not scheduled yet
        try:
            report = self.kube.custom.get_cluster_custom_object(GROUP, VERSION, "nodemountreports", pod.spec.node_name)
        except kubernetes.client.ApiException:
            return None
        mounts = [v for v in report["spec"]["volumes"] if v["podUid"] == pod.metadata.uid]
        return mounts[0]["effectiveOptions"] if mounts else None

    def in_effect(self, pod, declared: list[str]) -> dict | None:
        """The value in effect, by the node's report, of each option ``declared`` names (None: not reported)."""
        reported = self.reported_options(pod)
        if reported is None:
            return None
        effective = with_kernel_defaults(normalize(reported, observed=True).options)
        return {name: effective.get(name) for name in normalize(declared).options}

    def mounts(self, pod, declared: list[str]) -> bool:
        """The pod's volume has every option of ``declared`` in effect, with that value."""
        return self.in_effect(pod, declared) == dict(normalize(declared).options)

    def settle(self, target: str) -> dict:
        """The rollout Complete, or stuck on a superblock its own replicas keep alive (RemountsExhausted)."""
        def settled():
            rollout = self.rollout()
            stuck = any(line.get("reason") == "RemountsExhausted" for line in rollout.get("workloads") or [])
            return rollout if rollout.get("targetStorageClassName") == target and (
                rollout.get("phase") == "Complete" or stuck) else None
        return wait_for(settled, timeout=ROLLOUT_TIMEOUT, interval=0.5, what=f"the rollout to {target} settled")

    def scale_to_zero_and_back(self, name: str, replicas: int, target: str) -> dict:
        """What RemountsExhausted says to do: the superblock goes with its last mount, the next mount is fresh."""
        self.kube.apps.patch_namespaced_deployment_scale(name, self.namespace, {"spec": {"replicas": 0}})
        wait_for(lambda: not self.kube.core.list_namespaced_pod(self.namespace, label_selector=f"app={name}").items,
                 what=f"every pod of {name} gone")
        self.kube.apps.patch_namespaced_deployment_scale(name, self.namespace, {"spec": {"replicas": replicas}})
        return self.wait_phase("Complete", target)

    def remounted_once(self, name: str, target: str) -> dict:
        """One replica evicted to remount, and the rollout Complete: its line. Either outcome a real node gives is
        asserted: the evicted replica unmounted before its replacement mounted (a fresh superblock, one remount),
        or after it (the same superblock again until the remounts ran out; then zero and back, as it says)."""
        rollout = self.settle(target)
        (line,) = rollout["workloads"]
        if rollout["phase"] != "Complete":
            print("the replacement mounted before the evicted replica unmounted: stuck, then zero and back")
            self.assert_stuck(line, replicas=1)
            (line,) = self.scale_to_zero_and_back(name, 1, target)["workloads"]
        else:
            print("the evicted replica unmounted before its replacement mounted: a fresh superblock")
            assert line["remounts"] == 1
        assert (line["state"], line["reason"]) == ("Done", "Verified"), line
        return line

    def assert_stuck(self, line: dict, replicas: int) -> None:
        """Each replacement mounted while a replica being replaced still held the old superblock (a real kubelet
        unmounts a pod's volumes after its successor mounted), so it got that superblock again, until twice the
        replicas' remounts ran out."""
        assert (line["state"], line["reason"], line["remounts"]) == ("Blocked", "RemountsExhausted", 2 * replicas)
        assert "differ from it only in timeo" in line["message"], line
        assert "scale the workload to zero and back" in line["message"], line

    def close(self) -> None:
        for pv in self.volumes:
            try:
                self.kube.core.delete_persistent_volume(pv)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
        self.kube.delete_profile(self.profile)


@pytest.fixture
def scenario(kube, namespace, unique, cluster, rollout_operator, nodes) -> Iterator[Scenario]:
    case = Scenario(kube, namespace, unique, list(cluster.node_names))
    yield case
    case.close()


class StateRecorder:
    """Polls the rollout in a thread: every distinct view of the workloads' states, in order."""

    def __init__(self, case: Scenario) -> None:
        self.case = case
        self.views: list[dict[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "StateRecorder":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._look()

    def _look(self) -> None:
        view = {w["name"]: w["state"] for w in self.case.rollout().get("workloads", [])}
        if view and (not self.views or view != self.views[-1]):
            self.views.append(view)

    def done_order(self) -> list[str]:
        order: list[str] = []
        for view in self.views:
            order.extend(name for name, state in view.items() if state == "Done" and name not in order)
        return order


def other_consumer_mounted(case, node: str) -> str:
    """Another consumer of one export on ``node``, through a PV no profile governs, mounted: the export's path."""
    export = f"/{case.unique}/shared"
    case.claim("other", "", STAGING, path=export)
    case.bare_pod("other", "other", node)
    wait_for(lambda: case.reported_options(case.kube.core.read_namespaced_pod("other", case.namespace)),
             what=lambda: f"the other consumer mounted ({case.where('other')})")
    return export


def test_workloads_restart_one_at_a_time_and_are_verified_on_the_nodes(scenario):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    for name in ("api", "web", "worker"):
        case.claim(name, case.v1, STAGING)
        case.deployment(name, name)
    case.statefulset("db")
    case.wait_ready(("Deployment", "api", 3), ("Deployment", "web", 3), ("Deployment", "worker", 3),
                    ("StatefulSet", "db", 3))
    assert len({p.spec.node_name for name in ("api", "web", "worker", "db") for p in case.pods(name)}) == 3

    with StateRecorder(case) as recorder:
        case.apply("cached", rollout=AUTOMATIC)
        rollout = case.wait_phase("Complete", f"{case.profile}-v2")

    target = f"{case.profile}-v2"
    assert rollout["fromVersions"] == [1] and rollout["targetVersion"] == 2
    assert [(w["kind"], w["name"]) for w in rollout["workloads"]] == [
        ("Deployment", "api"), ("StatefulSet", "db"), ("Deployment", "web"), ("Deployment", "worker")]
    assert all(w["state"] == "Done" and w["reason"] == "Verified" for w in rollout["workloads"])
    # One at a time: no view ever had two workloads restarting or verifying, and they finished in order.
    assert recorder.views, "the recorder saw no rollout"
    assert max(sum(s in ("Restarting", "Verifying") for s in view.values()) for view in recorder.views) == 1
    assert recorder.done_order() == ["api", "db", "web", "worker"]
    for before, after in zip(rollout["workloads"], rollout["workloads"][1:], strict=False):
        assert after["restartedAt"] >= before["doneAt"], (before, after)

    assert rollout["volumesPatched"] == len(case.volumes) == 6
    for pv_name in case.volumes:
        pv = case.pv(pv_name)
        assert pv.spec.mount_options == CACHED
        assert pv.metadata.annotations["mountwarden.io/applied-version"] == target
        assert pv.metadata.annotations[PREVIOUS] == recorded(STAGING)
    for name in ("api", "web", "worker"):
        assert len(case.replica_sets(name)) == 2, f"{name} restarted more than once"
        assert case.template_annotations("Deployment", name)["mountwarden.io/restarted-for"] == target
    assert len(case.revisions("db")) == 2
    # The proof is on the nodes: every replica running now mounts the cached options (a superblock of their own:
    # the ac* times and lookupcache differ, and the kernel compares them).
    for name in ("api", "web", "worker", "db"):
        pods = case.pods(name)
        assert len(pods) == 3, name
        assert all(case.mounts(pod, CACHED) for pod in pods), [case.in_effect(pod, CACHED) for pod in pods]


def replicas_on_a_shared_superblock(case: Scenario, replicas: int) -> tuple[str, str]:
    """Replicas of Deployment app, restarted for v2, on the superblock of another consumer on their node.

    They mounted the file system after pod `other` (SuperblockShared); once `other` leaves, the superblock they
    joined stays with them, with the old options, and nobody else holds it: they must remount.
    """
    node = case.node_names[0]
    case.start("staging", rollout=AUTOMATIC)
    export = other_consumer_mounted(case, node)
    case.claim("app", case.v1, STAGING, path=export)
    case.deployment("app", "app", replicas=replicas, node=node)
    case.wait_ready(("Deployment", "app", replicas))
    # Only timeo changes: the kernel does not compare it, so the new pods land on the superblock the other
    # consumer keeps (a change of the ac* times would give them a superblock of their own: the kernel lab).
    case.apply("staging", rollout=AUTOMATIC, mountOptions=["timeo=300"])
    target = f"{case.profile}-v2"
    case.wait_phase("Paused", target)
    wait_for(lambda: len(case.pods("app")) == replicas and all(case.mounts(p, STAGING) for p in case.pods("app")),
             what="every restarted replica on the other consumer's superblock")
    return node, target


def test_a_shared_superblock_blocks_the_workload_until_the_other_consumer_moves(scenario):
    case = scenario
    elsewhere = case.node_names[1]
    node, target = replicas_on_a_shared_superblock(case, replicas=1)
    rollout = case.wait_phase("Paused", target)
    (line,) = rollout["workloads"]
    (pod,) = case.pods("app")
    assert line["state"] == "Blocked" and line["reason"] == "SuperblockShared"
    assert line["pod"] == pod.metadata.name and line["node"] == node
    assert f"pod {case.namespace}/{pod.metadata.name} on node {node}" in line["message"]
    assert f"pod {case.namespace}/other" in line["message"] and "Move or restart" in line["message"]
    assert "paused at Deployment" in rollout["message"]
    assert case.mounts(pod, STAGING) and case.in_effect(pod, ["timeo=300"]) == {"timeo": 600}
    assert case.rollout()["phase"] == "Paused"  # still blocked while the other consumer stays

    # Move the other consumer: the operator remounts the blocked replica, evicting it.
    case.kube.core.delete_namespaced_pod("other", case.namespace, grace_period_seconds=0)
    wait_for(lambda: not [p for p in case.kube.core.list_namespaced_pod(case.namespace).items
                          if p.metadata.name == "other"], what="the other consumer gone")
    case.bare_pod("other", "other", elsewhere)
    case.remounted_once("app", target)
    (pod,) = case.pods("app")
    assert pod.spec.node_name == node and case.mounts(pod, STAGING_TIMEO_300)
    assert len(case.replica_sets("app")) == 2


class PodHistory:
    """Watches one app's pods in a thread: every eviction and every replica becoming Ready, in the API's order."""

    def __init__(self, case: Scenario, app: str) -> None:
        self.case, self.app = case, app
        self.events: list[tuple[str, str]] = []  # ("gone", uid) or ("ready", uid)
        self._seen: set[tuple[str, str]] = set()
        self._watch = kubernetes.watch.Watch()
        self._stopping = False
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "PodHistory":
        listed = self.case.kube.core.list_namespaced_pod(self.case.namespace, label_selector=f"app={self.app}")
        for pod in listed.items:
            self._note("MODIFIED", pod)
        self._version = listed.metadata.resource_version
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stopping = True
        self._watch.stop()
        self._thread.join(timeout=30)
        assert not self.errors, f"the watch of the pods broke: {self.errors}"

    def _run(self) -> None:
        try:
            for event in self._watch.stream(self.case.kube.core.list_namespaced_pod, self.case.namespace,
                                            label_selector=f"app={self.app}", resource_version=self._version,
                                            timeout_seconds=600):
                self._note(event["type"], event["object"])
        except Exception as error:  # the stream is cut when stopped; before that, the history would be partial
            if not self._stopping:
                self.errors.append(error)

    def _note(self, kind: str, pod) -> None:
        uid = pod.metadata.uid
        ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        if kind == "DELETED" or pod.metadata.deletion_timestamp is not None:
            mark = ("gone", uid)
        elif ready:
            mark = ("ready", uid)
        else:
            return
        if mark not in self._seen:
            self._seen.add(mark)
            self.events.append(mark)

    def evictions_then_readiness(self, before: set[str]) -> list[str]:
        """From the pods in ``before`` on: "gone" for each removal, "ready" for each new replica become Ready."""
        return [kind for kind, uid in self.events if kind == "gone" or uid not in before]


@contextmanager
def cordoned(case: Scenario, node: str) -> Iterator[None]:
    """No new pod starts on ``node`` meanwhile: an evicted replica's replacement stays Pending, never Ready."""
    case.kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        yield
    finally:
        case.kube.core.patch_node(node, {"spec": {"unschedulable": None}})


def test_stale_replicas_are_evicted_one_at_a_time_until_the_remounts_run_out_then_zero_and_back_remounts(scenario):
    """Three replicas on a superblock only they hold: each replacement mounts while the other replicas still hold
    it, so the kernel gives it that superblock again (a real node does the same), whatever the operator evicts; it
    evicts one at a time, each after the last one's replacement is Ready, until twice the replicas' remounts, and
    says to scale to zero and back, after which every replica mounts the new options."""
    case = scenario
    node, target = replicas_on_a_shared_superblock(case, replicas=3)
    stale = {pod.metadata.uid for pod in case.pods("app")}
    with PodHistory(case, "app") as history:
        with cordoned(case, node):
            case.kube.core.delete_namespaced_pod("other", case.namespace, grace_period_seconds=0)
            wait_for(lambda: history.evictions_then_readiness(stale).count("gone"), timeout=ROLLOUT_TIMEOUT,
                     what="the first eviction")
            time.sleep(5)  # five ticks: the replacement cannot start, so no other replica may go meanwhile
            assert history.evictions_then_readiness(stale) == ["gone"], history.events
            (line,) = case.rollout()["workloads"]
            assert (line["state"], line["reason"]) in (("Restarting", "Remounting"),
                                                       ("Verifying", "WaitingForReplicas")), line
        rollout = case.settle(target)

    (line,) = rollout["workloads"]
    case.assert_stuck(line, replicas=3)
    # Stuck as soon as one replica is judged stale: the last replacement's node report may come after that.
    in_effect = wait_for(lambda: None not in (found := [case.in_effect(pod, ["timeo=300"]) for pod in case.pods("app")])
                         and found, what="a node report for every replica")
    assert in_effect == [{"timeo": 600}] * 3
    # Each eviction waited for the previous one's replacement to be Ready: never two replicas out at once.
    order = history.evictions_then_readiness(stale)
    assert order.count("gone") == 6 and not any(a == b == "gone" for a, b in zip(order, order[1:], strict=False)), (
        order)
    evictions = wait_for(lambda: len(found := [e.message for e in case.kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={case.profile}").items if e.reason == "RemountingPod"]) == 6 and found,
        what="six RemountingPod events")
    assert all(m.startswith(f"evicting pod {case.namespace}/app-") for m in evictions), evictions

    rollout = case.scale_to_zero_and_back("app", 3, target)
    (line,) = rollout["workloads"]
    assert line["state"] == "Done" and line["reason"] == "Verified"
    pods = case.pods("app")
    assert len(pods) == 3 and all(case.mounts(pod, STAGING_TIMEO_300) for pod in pods)


def test_a_disruption_budget_that_refuses_leaves_the_workload_waiting_and_names_it(scenario, rollout_operator):
    case = scenario
    policy = kubernetes.client.PolicyV1Api(case.kube.client)
    policy.create_namespaced_pod_disruption_budget(case.namespace, {
        "metadata": {"name": "app-budget"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "app"}}}})
    node, target = replicas_on_a_shared_superblock(case, replicas=1)
    (kept,) = case.pods("app")
    case.kube.core.delete_namespaced_pod("other", case.namespace, grace_period_seconds=0)

    def waiting():
        rollout = case.rollout()
        lines = rollout.get("workloads") or []
        return rollout if rollout.get("phase") == "Waiting" and lines[0]["reason"] == "DisruptionBudget" else None

    rollout = wait_for(waiting, timeout=ROLLOUT_TIMEOUT, what="the workload waiting for its budget")
    (line,) = rollout["workloads"]
    assert line["state"] == "Waiting" and line["pod"] == kept.metadata.name and line["node"] == node
    assert f"PodDisruptionBudget {case.namespace}/app-budget refuses" in line["message"]
    assert f"PodDisruptionBudget {case.namespace}/app-budget" in rollout["message"]
    time.sleep(5)  # several ticks: still there, still the same replica
    assert [p.metadata.uid for p in case.pods("app")] == [kept.metadata.uid]
    assert case.rollout()["phase"] == "Waiting"
    # What the alert RolloutWaitingOnDisruptionBudget reads, naming the workload.
    samples = scrape(rollout_operator.metrics_port)
    assert samples[("mountwarden_rollout_phase", (("phase", "Waiting"), ("profile", case.profile)))] == 1
    assert samples[("mountwarden_rollout_workloads_held", (
        ("namespace", case.namespace), ("profile", case.profile), ("reason", "DisruptionBudget"), ("state", "Waiting"),
        ("workload", f"{line['kind']}/{line['name']}")))] == 1

    # The budget allows a disruption: the replica is evicted, and its replacement mounts afresh, or, when it mounted
    # before the evicted replica unmounted, on the same superblock until the remounts run out (a real node gives
    # either).
    policy.patch_namespaced_pod_disruption_budget("app-budget", case.namespace, {"spec": {"minAvailable": 0}})
    case.remounted_once("app", target)
    (replacement,) = case.pods("app")
    assert replacement.metadata.uid != kept.metadata.uid and case.mounts(replacement, STAGING_TIMEO_300)


def test_an_hpa_at_zero_leaves_its_deployment_waiting(scenario):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    case.claim("batch", case.v1, STAGING)
    case.deployment("batch", "batch", replicas=0)
    # kube-controller-manager disables an HPA whose target is at zero (ScalingActive False, ScalingDisabled)
    # by itself, without a metrics server.
    autoscaling = kubernetes.client.AutoscalingV2Api(case.kube.client)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(
        case.namespace, {
            "metadata": {"name": "batch"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "batch"},
                     "minReplicas": 1, "maxReplicas": 3,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]},
        })

    case.apply("cached", rollout=AUTOMATIC)
    target = f"{case.profile}-v2"

    def disabled():
        rollout = case.rollout()
        lines = rollout.get("workloads") or []
        return rollout if lines and lines[0]["reason"] == "ScalingDisabled" else None

    try:
        # kube-controller-manager handles a new HPA one sync period (15 s) after it sees it, and again one period
        # after each failed status write.
        rollout = wait_for(disabled, timeout=ROLLOUT_TIMEOUT, what="the HPA's ScalingDisabled in the rollout")
    except WaitTimedOut as timed_out:
        hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler("batch", case.namespace)
        conditions = [(c.type, c.status, c.reason) for c in hpa.status.conditions or []]
        raise AssertionError(f"{timed_out}; the HPA's conditions: {conditions}; the rollout: {case.rollout()}") from timed_out
    assert rollout["phase"] == "Waiting" and rollout["targetStorageClassName"] == target
    (line,) = rollout["workloads"]
    assert line["state"] == "Waiting" and "deliberate scale-up" in line["message"]
    assert "scale-up is needed" in rollout["message"]
    assert case.pv(case.volumes[0]).spec.mount_options == CACHED

    # A deliberate scale-up: the new replica is verified, and it was not restarted a second time.
    case.kube.apps.patch_namespaced_deployment_scale("batch", case.namespace, {"spec": {"replicas": 1}})
    rollout = case.wait_phase("Complete", target)
    assert rollout["workloads"][0]["state"] == "Done"
    assert [case.mounts(pod, CACHED) for pod in case.pods("batch")] == [True]


def test_manual_approval_waits_for_the_annotation(scenario):
    case = scenario
    manual = {"strategy": "PatchBoundVolumes", "approval": "Manual"}
    case.start("staging", rollout=manual)
    pv = case.claim("app", case.v1, STAGING)
    case.deployment("app", "app", replicas=2)
    case.wait_ready(("Deployment", "app", 2))

    case.apply("cached", rollout=manual)
    rollout = case.wait_phase("AwaitingApproval", f"{case.profile}-v2")
    assert "mountwarden.io/approve-rollout=2" in rollout["message"]
    assert [(w["name"], w["state"], w["reason"]) for w in rollout["workloads"]] == [
        ("app", "Pending", "AwaitingApproval")]
    assert case.pv(pv).spec.mount_options == STAGING
    assert len(case.replica_sets("app")) == 1

    case.kube.custom.patch_cluster_custom_object(GROUP, VERSION, "storageprofiles", case.profile, {
        "metadata": {"annotations": {"mountwarden.io/approve-rollout": "2"}}})
    case.wait_phase("Complete", f"{case.profile}-v2")
    assert case.pv(pv).spec.mount_options == CACHED
    assert len(case.replica_sets("app")) == 2


@pytest.mark.chaos
@pytest.mark.parametrize("seed", range(5))
def test_an_operator_killed_mid_rollout_restarts_every_workload_exactly_once(scenario, rollout_operator, seed):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    names = ("alpha", "bravo", "charlie")
    for name in names:
        case.claim(name, case.v1, STAGING)
        case.deployment(name, name, replicas=2)
    case.wait_ready(*(("Deployment", name, 2) for name in names))

    # SIGKILL at random points of the rollout (seeded: a failure can be replayed), twice per run. Rollouts
    # move on events, faster than any fixed delay could aim at: the first kill waits for the seeded number of
    # workloads (0 or 1) to be Done while another is under way; the second lands a random time after the
    # restart, often while the operator is still starting up.
    chance = random.Random(seed)
    done_at_first_kill = chance.randrange(2)
    case.apply("cached", rollout=AUTOMATIC)

    def states() -> dict[str, str]:
        return {w["name"]: w["state"] for w in case.rollout().get("workloads", [])}

    wait_for(lambda: (now := states()) and any(state != "Pending" for state in now.values())
             and sum(state == "Done" for state in now.values()) >= done_at_first_kill,
             timeout=ROLLOUT_TIMEOUT, interval=0.05, what=f"{done_at_first_kill} workload(s) Done, one under way")
    seen_at_kills = []
    for kill in range(2):
        if kill:
            time.sleep(chance.uniform(0.2, 3.0))
        rollout_operator.stop(signal.SIGKILL)
        seen_at_kills.append(states())
        rollout_operator.start()
    rollout = case.wait_phase("Complete", f"{case.profile}-v2")
    assert set(seen_at_kills[0].values()) != {"Done"}, f"the first kill came after the rollout: {seen_at_kills}"

    assert all(w["state"] == "Done" for w in rollout["workloads"])
    for name in names:
        assert len(case.replica_sets(name)) == 2, f"{name} was restarted more than once"
    for pv_name in case.volumes:
        pv = case.pv(pv_name)
        assert pv.spec.mount_options == CACHED
        assert pv.metadata.annotations[PREVIOUS] == recorded(STAGING)
    rollout_operator.assert_running()


def test_new_storage_class_leaves_old_volumes_alone_and_lists_their_consumers(scenario):
    case = scenario
    migrate = {"strategy": "NewStorageClass", "approval": "Automatic"}
    case.start("staging", rollout=migrate)
    pv = case.claim("app", case.v1, STAGING)
    case.deployment("app", "app", replicas=2)
    case.wait_ready(("Deployment", "app", 2))

    case.apply("cached", rollout=migrate)
    rollout = case.wait_phase("AwaitingMigration", f"{case.profile}-v2")
    assert rollout["volumes"] == [pv] and rollout["workloads"] == []
    (consumer,) = rollout["consumersOnOlderVersions"]
    assert (consumer["kind"], consumer["name"], consumer["storageClassNames"]) == ("Deployment", "app", [case.v1])
    assert ".backup" in rollout["guidance"] and "VACUUM INTO" in rollout["guidance"]
    assert f"{case.profile}-v2" in rollout["guidance"]
    volume = case.pv(pv)
    assert volume.spec.mount_options == STAGING
    assert "mountwarden.io/applied-version" not in (volume.metadata.annotations or {})
    assert len(case.replica_sets("app")) == 1


def test_reverting_the_profile_rolls_the_previous_options_back(scenario):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    pv = case.claim("app", case.v1, STAGING)
    case.deployment("app", "app", replicas=2)
    case.wait_ready(("Deployment", "app", 2))
    case.apply("cached", rollout=AUTOMATIC)
    case.wait_phase("Complete", f"{case.profile}-v2")

    # The PVs still name v1, so v1 is kept: reverting makes it current again, and the rollout goes back to it.
    case.apply("staging", rollout=AUTOMATIC)
    rollout = case.wait_phase("Complete", case.v1)
    assert rollout["fromVersions"] == [2] and "supersedes" not in rollout
    volume = case.pv(pv)
    assert volume.spec.mount_options == STAGING
    assert volume.metadata.annotations["mountwarden.io/applied-version"] == case.v1
    assert volume.metadata.annotations[PREVIOUS] == recorded(CACHED)
    assert len(case.replica_sets("app")) == 3
    assert [case.mounts(pod, STAGING) for pod in case.pods("app")] == [True, True]


def test_a_new_change_supersedes_the_running_rollout(scenario):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    names = ("one", "three", "two")
    for name in names:
        case.claim(name, case.v1, STAGING)
        case.deployment(name, name, replicas=2)
    case.wait_ready(*(("Deployment", name, 2) for name in names))

    case.apply("cached", rollout=AUTOMATIC)
    wait_for(lambda: any(w["state"] != "Pending" for w in case.rollout().get("workloads", [])
                         if case.rollout().get("targetVersion") == 2), what="the rollout to v2 under way")
    # An option the kernel compares, so each new replica gets a superblock of its own. (nconnect would not do: it is
    # the NFS client's, fixed by the first mount of the file system on the node while any of its mounts stays.)
    case.apply("cached", rollout=AUTOMATIC, mountOptions=["lookupcache=positive"])
    rollout = case.wait_phase("Complete", f"{case.profile}-v3")
    assert rollout["supersedes"] == f"{case.profile}-v2"
    for name in names:
        assert case.template_annotations("Deployment", name)["mountwarden.io/restarted-for"] == f"{case.profile}-v3"
        pods = case.pods(name)
        assert len(pods) == 2 and all(case.mounts(pod, ["lookupcache=positive", "acregmax=600"]) for pod in pods)
    assert len(case.volumes) == 3
    for pv_name in case.volumes:
        assert "lookupcache=positive" in case.pv(pv_name).spec.mount_options


def test_plan_command_is_a_dry_run_against_the_cluster(scenario, cluster, tmp_path):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    pv = case.claim("app", case.v1, STAGING)
    case.deployment("app", "app", replicas=2)
    case.bare_pod("loner", "app", case.node_names[0])
    case.wait_ready(("Deployment", "app", 2))

    changed = profile_body(case.profile, "cached", rollout=AUTOMATIC)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(changed))
    result = subprocess.run(
        [sys.executable, "-m", "mountwarden", "plan", str(path), "--json", "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["profile"], plan["fromVersions"], plan["toVersion"], plan["strategy"]) == (
        case.profile, [1], 2, "PatchBoundVolumes")
    assert [(v["name"], v["action"], v["fromVersion"]) for v in plan["volumes"]] == [(pv, "patch", 1)]
    workloads = {(w["kind"], w["name"]): w for w in plan["workloads"]}
    deployment = workloads[("Deployment", "app")]
    assert (deployment["replicas"], deployment["volumes"], deployment["action"]) == (2, [pv], "restart")
    assert len(deployment["pods"]) == 2
    loner = workloads[("Pod", "loner")]
    assert loner["action"] == "none" and "never deletes" in loner["note"]
    assert any("loner" in warning for warning in plan["warnings"])
    # A dry run: nothing changed.
    assert case.pv(pv).spec.mount_options == STAGING
    assert sorted(case.kube.classes_of(case.profile)) == [case.v1]


# -- a rollout touches only the workload whose turn it is -------------------------------------------


@contextmanager
def every_node_cordoned(case: Scenario) -> Iterator[None]:
    """No new pod starts anywhere meanwhile: a restarted workload's new replica stays Pending, its rollout open."""
    with ExitStack() as stack:
        for node in case.node_names:
            stack.enter_context(cordoned(case, node))
        yield


def test_a_workload_s_volumes_are_patched_at_its_turn_and_the_next_workload_s_not_before(scenario):
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    first, second = case.claim("alpha", case.v1, STAGING), case.claim("bravo", case.v1, STAGING)
    case.deployment("alpha", "alpha", replicas=1)
    case.deployment("bravo", "bravo", replicas=1)
    case.wait_ready(("Deployment", "alpha", 1), ("Deployment", "bravo", 1))
    target = f"{case.profile}-v2"

    with every_node_cordoned(case):
        case.apply("cached", rollout=AUTOMATIC)

        def alpha_restarting():
            rollout = case.rollout()
            states = {w["name"]: w["state"] for w in rollout.get("workloads") or []}
            return rollout if rollout.get("targetStorageClassName") == target and states.get(
                "alpha") == "Restarting" else None

        rollout = wait_for(alpha_restarting, timeout=ROLLOUT_TIMEOUT, what="alpha restarted, its replica Pending")
        assert {w["name"]: w["state"] for w in rollout["workloads"]} == {"alpha": "Restarting", "bravo": "Pending"}
        assert case.pv(first).spec.mount_options == CACHED
        assert case.pv(first).metadata.annotations[PREVIOUS] == recorded(STAGING)
        # bravo's turn has not come: a pod of it rescheduled now would still mount the options it runs with.
        bravo = case.pv(second)
        assert bravo.spec.mount_options == STAGING
        assert "mountwarden.io/applied-version" not in (bravo.metadata.annotations or {})
        assert len(case.replica_sets("bravo")) == 1

    rollout = case.wait_phase("Complete", target)
    assert all(w["state"] == "Done" for w in rollout["workloads"])
    assert case.pv(second).spec.mount_options == CACHED
    assert [case.mounts(pod, CACHED) for pod in case.pods("bravo")] == [True]


def test_a_workload_whose_new_mount_fails_stops_the_rollout_with_the_later_workloads_volumes_untouched(scenario):
    """app's restarted replica lands on another consumer's superblock with the old options: it never verifies,
    and zulu (next in turn) keeps its PV and its pods as they were."""
    case = scenario
    node = case.node_names[0]
    case.start("staging", rollout=AUTOMATIC)
    export = other_consumer_mounted(case, node)
    app = case.claim("app", case.v1, STAGING, path=export)
    zulu = case.claim("zulu", case.v1, STAGING)
    case.deployment("app", "app", replicas=1, node=node)
    case.deployment("zulu", "zulu", replicas=1)
    case.wait_ready(("Deployment", "app", 1), ("Deployment", "zulu", 1))
    (zulu_pod,) = case.pods("zulu")

    case.apply("staging", rollout=AUTOMATIC, mountOptions=["timeo=300"])
    target = f"{case.profile}-v2"
    rollout = case.wait_phase("Paused", target)
    lines = {w["name"]: w for w in rollout["workloads"]}
    assert (lines["app"]["state"], lines["app"]["reason"]) == ("Blocked", "SuperblockShared")
    assert (lines["zulu"]["state"], lines["zulu"]["reason"]) == ("Pending", "Paused")
    assert "timeo=300" in case.pv(app).spec.mount_options
    untouched = case.pv(zulu)
    assert untouched.spec.mount_options == STAGING
    assert not {key for key in untouched.metadata.annotations or {} if key.startswith("mountwarden.io/")}
    assert len(case.replica_sets("zulu")) == 1
    assert [p.metadata.uid for p in case.pods("zulu")] == [zulu_pod.metadata.uid]


def test_an_option_with_a_comma_is_recorded_whole_and_a_rollback_from_the_record_restores_it_exactly(scenario):
    """An SELinux context holds commas: the previous options are a JSON array, which is also what a rollback by
    hand writes back (docs/runbook.md)."""
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    labelled = [*STAGING, 'context="system_u:object_r:nfs_t:s0:c1,c2"']
    pv = case.claim("idle", case.v1, labelled)  # no consumer: patched as soon as no workload is left to roll
    case.apply("cached", rollout=AUTOMATIC)
    case.wait_phase("Complete", f"{case.profile}-v2")
    volume = case.pv(pv)
    assert volume.spec.mount_options == CACHED
    record = volume.metadata.annotations[PREVIOUS]
    assert json.loads(record) == labelled

    case.kube.core.patch_persistent_volume(pv, {"spec": {"mountOptions": json.loads(record)}})
    assert case.pv(pv).spec.mount_options == labelled


def test_a_tick_handed_a_stale_view_of_its_profile_judges_from_the_stored_one_and_reads_nothing_more(scenario):
    """kopf's live view of a profile can lag behind its daemon's own status write: a tick woken by the watch events
    of its own PV patches saw no finished rollout there and read the whole cluster again. It judges from the stored
    profile, which says Complete, and reads no workload, pod or PV."""
    case = scenario
    case.start("staging", rollout=AUTOMATIC)
    pv = case.claim("data", case.v1, STAGING)
    case.apply("cached", rollout=AUTOMATIC)
    case.wait_phase("Complete", f"{case.profile}-v2")
    stored = case.kube.profile(case.profile)
    stale = {**stored, "status": {**stored["status"], "rollout": None}}  # as the live view was before the write

    reads = []

    class Counted(ClusterWorkloads):
        def read(self, *args, **kwargs):
            reads.append(args)
            return super().read(*args, **kwargs)

    rollout = ProfileRollout(case.profile, case.kube.client, RolloutWakeups())
    rollout.cluster = Counted(case.kube.client)
    by_class = {case.v1: [pv]}  # PatchBoundVolumes leaves the PV on its class, with the new options
    rollout.tick(stale, by_class)
    assert reads == []
    assert case.rollout()["phase"] == "Complete" and case.pv(pv).spec.mount_options == CACHED

    # Handed the same stale view while the stored profile's rollout does need the cluster, it reads it once.
    case.kube.custom.patch_cluster_custom_object_status(GROUP, VERSION, "storageprofiles", case.profile,
                                                       {"status": {"rollout": {"volumes": []}}})
    rollout.tick(stale, by_class)
    assert len(reads) == 1
    case.wait_phase("Complete", f"{case.profile}-v2")


def test_a_tick_keeps_only_the_pods_of_its_claims_reading_the_namespace_in_pages(kube, namespace, unique):
    """A tick reads the PVs and the pods of its claims' namespaces page by page, keeps those that mount one of its
    claims, and of the others only their names (or none, when it is handed the operator's names)."""
    lineage = f"paged-{unique}-v1"
    # Listed by name, in pages of one PV: the tick's own PV comes after the other's, so only a read of every page
    # finds it.
    pvs = {"theirs": f"pv-paged-{unique}-0", "mine": f"pv-paged-{unique}-1"}
    for claim, storage_class in (("mine", lineage), ("theirs", f"other-{unique}")):
        prebound_claim(kube, namespace, claim, pvs[claim], storage_class, STAGING,
                       server="nfs.example", path=f"/{unique}/{claim}")
    try:
        wait_for(lambda: all(kube.core.read_persistent_volume(pv).status.phase == "Bound" for pv in pvs.values()),
                 what="both PVs bound")
        volumes = {"mine": [{"name": "d", "persistentVolumeClaim": {"claimName": "mine"}}],
                   "theirs": [{"name": "d", "persistentVolumeClaim": {"claimName": "theirs"}}],
                   "plain": [{"name": "d", "emptyDir": {}}]}
        names = {"mine-0": "mine", "mine-1": "mine", "theirs-0": "theirs", "plain-0": "plain", "mine-2": "mine"}
        uids = {}
        for name, volume in names.items():
            created = kube.core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": {
                "containers": [{"name": "app", "image": "busybox"}], "volumes": volumes[volume]}})
            uids[name] = created.metadata.uid

        world = ClusterWorkloads(kube.client, pod_page_size=2, pv_page_size=1).read([lineage], with_reports=False)
        assert [volume.name for volume in world.volumes] == [pvs["mine"]]
        assert sorted(pod.name for pod in world.pods) == ["mine-0", "mine-1", "mine-2"]  # three pages of two
        assert {name: world.pod_name_of(uid) for name, uid in uids.items()} == {
            "mine-0": None, "mine-1": None, "mine-2": None,  # kept whole, in world.pods
            "theirs-0": f"{namespace}/theirs-0", "plain-0": f"{namespace}/plain-0"}

        given = {"some-uid": "elsewhere/pod"}.get
        world = ClusterWorkloads(kube.client, pod_page_size=2).read([lineage], with_reports=False, pod_name_of=given)
        assert sorted(pod.name for pod in world.pods) == ["mine-0", "mine-1", "mine-2"] and world.pod_name_of is given
    finally:
        for pv in pvs.values():
            kube.core.delete_persistent_volume(pv)


def test_a_volume_changed_by_another_writer_after_the_read_is_re_read_and_nothing_it_wrote_is_lost(kube, namespace,
                                                                                                   unique):
    """The tick as the rollout daemon runs it (read, plan, perform), against the API server: an outside write
    between the read and the patch makes the guarded patch fail (409, retried as transient), the workload is not
    restarted on that view, and the next tick records the outside writer's options as the previous ones."""
    staging_class, cached_class = f"conflict-{unique}-v1", f"conflict-{unique}-v2"
    pv = f"pv-conflict-{unique}"
    prebound_claim(kube, namespace, "data", pv, staging_class, STAGING,
                   server="fs-0123456789abcdef0.efs.us-east-1.amazonaws.com", path=f"/{unique}")
    try:
        kube.apps.create_namespaced_deployment(namespace, {
            "metadata": {"name": "app"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "app"}}, "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {"containers": [{"name": "app", "image": "busybox"}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}}})
        wait_for(lambda: kube.core.read_persistent_volume(pv).status.phase == "Bound", what="the PV bound")
        versions = (Version(staging_class, 1, tuple(STAGING)), Version(cached_class, 2, tuple(CACHED)))
        target = Target(f"conflict-{unique}", versions[1], versions, Policy(approval="Automatic"))
        cluster = ClusterWorkloads(kube.client)

        def tick():
            world = cluster.read([staging_class, cached_class], with_reports=False)
            return advance(build_plan(target, world), None, datetime.now(UTC))

        step = tick()
        assert [type(action) for action in step.actions] == [PatchVolume, RestartWorkload]
        outside = [*STAGING, "nconnect=4"]
        kube.core.patch_persistent_volume(pv, {"metadata": {"annotations": {"example.com/owner": "team-b"}},
                                               "spec": {"mountOptions": outside}})
        with pytest.raises(TransientApiError) as refused:
            cluster.perform(step.actions)
        assert refused.value.status == 409 and refused.value.performed == 0
        volume = kube.core.read_persistent_volume(pv)
        assert volume.spec.mount_options == outside and PREVIOUS not in volume.metadata.annotations
        template = kube.apps.read_namespaced_deployment("app", namespace).spec.template.metadata.annotations or {}
        assert "mountwarden.io/restarted-for" not in template  # not restarted on the view the patch was refused on

        cluster.perform(tick().actions)
        volume = kube.core.read_persistent_volume(pv)
        assert volume.spec.mount_options == CACHED
        assert volume.metadata.annotations[PREVIOUS] == recorded(outside)
        assert volume.metadata.annotations["example.com/owner"] == "team-b"
        template = kube.apps.read_namespaced_deployment("app", namespace).spec.template.metadata.annotations
        assert template["mountwarden.io/restarted-for"] == cached_class
    finally:
        kube.core.delete_persistent_volume(pv)


def test_a_refused_patch_says_how_many_writes_of_its_tick_went_in_before_it(kube, namespace, unique):
    """Unused PVs are patched in one batch; an outside write to the third refuses its patch (409) and stops the
    rest, and the error counts the two that went in: the rollout daemon retries such a tick at once
    (mountwarden.handlers.errors.Retries), as it has less left to do."""
    staging_class, cached_class = f"batch-{unique}-v1", f"batch-{unique}-v2"
    pvs = [f"pv-batch-{unique}-{n}" for n in range(4)]
    for n, pv in enumerate(pvs):
        prebound_claim(kube, namespace, f"data-{n}", pv, staging_class, STAGING,
                       server="fs-0123456789abcdef0.efs.us-east-1.amazonaws.com", path=f"/{unique}/{n}")
    try:
        for pv in pvs:
            wait_for(lambda pv=pv: kube.core.read_persistent_volume(pv).status.phase == "Bound", what=f"{pv} bound")
        versions = (Version(staging_class, 1, tuple(STAGING)), Version(cached_class, 2, tuple(CACHED)))
        target = Target(f"batch-{unique}", versions[1], versions, Policy(approval="Automatic"))
        cluster = ClusterWorkloads(kube.client)
        world = cluster.read([staging_class, cached_class], with_reports=False)
        step = advance(build_plan(target, world), None, datetime.now(UTC))
        patched = [action.name for action in step.actions if isinstance(action, PatchVolume)]
        assert sorted(patched) == pvs
        kube.core.patch_persistent_volume(patched[2], {"metadata": {"labels": {"example.com/team": "b"}}})
        with pytest.raises(TransientApiError) as refused:
            cluster.perform(step.actions)
        assert refused.value.status == 409 and refused.value.performed == 2
        options = {pv: kube.core.read_persistent_volume(pv).spec.mount_options for pv in patched}
        assert options == {patched[0]: CACHED, patched[1]: CACHED, patched[2]: STAGING, patched[3]: STAGING}
    finally:
        for pv in pvs:
            kube.core.delete_persistent_volume(pv)
