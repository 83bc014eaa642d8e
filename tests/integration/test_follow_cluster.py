"""The operator's start: the first lists of pods, PVs and claims, and what they filed kept out of the collector's walks."""

import asyncio
import gc
import logging

import kopf
import kubernetes
import pytest

from mountwarden.adapters import watches
from mountwarden.adapters.kube import api_client
from mountwarden.adapters.pods import pod_entries, pod_page_entries
from mountwarden.adapters.watches import reduce_json_page
from mountwarden.handlers.collector import thaw_everything
from mountwarden.handlers.indexes import cluster_watches, follow_cluster

pytestmark = pytest.mark.cluster

PV = "mw-follow-cluster-probe"


def test_what_the_first_lists_filed_is_frozen_out_of_the_garbage_collectors_walks(cluster):
    client = api_client(str(cluster.kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    created = core.create_persistent_volume({
        "metadata": {"name": PV},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": f"{PV}-v1",
                 "claimRef": {"namespace": "default", "name": PV}, "nfs": {"server": "nas", "path": "/"}}})
    memo = kopf.Memo(watches=cluster_watches(client))
    frozen_before = gc.get_freeze_count()
    try:
        asyncio.run(follow_cluster(memo, logging.getLogger(__name__)))
        # What the first list of PVs filed for it (the one holder of its claim's entry, under its name).
        filed = memo.watches.volumes.indexes["claims_by_volume"]._store[created.metadata.name]
        assert gc.is_tracked(filed)
        assert gc.get_freeze_count() > frozen_before
        # gc.get_objects() lists what a collection walks: the generations, not the frozen objects.
        assert not any(obj is filed for obj in gc.get_objects())
    finally:
        thaw_everything()
        memo.watches.stop()
        core.delete_persistent_volume(PV)


def test_the_pods_pages_are_decoded_to_what_each_pod_files_as_the_api_server_sends_them(cluster, namespace):
    """The pods' lists are decoded only as far as a placement reads them: on the API server's own pages (defaults,
    managed fields, status, continue tokens), that files exactly what decoding each pod whole does."""
    core = kubernetes.client.CoreV1Api(api_client(str(cluster.kubeconfig)))
    container = [{"name": "app", "image": "registry.invalid/app:1"}]
    shapes = {
        "claims": [{"name": "a", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}},
                   {"name": "b", "persistentVolumeClaim": {"claimName": "cache"}}],
        "inline-nfs": [{"name": "nas", "nfs": {"server": "nas.invalid", "path": "/export"}}],
        "inline-csi": [{"name": "efs", "csi": {"driver": "efs.csi.aws.com", "volumeAttributes": {"x": "y"}}}],
        "empty-dir": [{"name": "scratch", "emptyDir": {}}],
    }
    for name, volumes in shapes.items():
        core.create_namespaced_pod(namespace, {"metadata": {"name": name, "labels": {"pod-template-hash": "abc"}},
                                               "spec": {"nodeName": "nowhere", "containers": container,
                                                        "volumes": volumes}})
    token, seen = None, {}
    while True:
        data = core.list_namespaced_pod(namespace, limit=3, _continue=token, _preload_content=False).data
        decoded, token, resource_version = pod_page_entries(data)
        assert (decoded, token, resource_version) == reduce_json_page(data, pod_entries) and resource_version
        seen.update(decoded)
        if not token:
            break
    kept = {entries["pods_by_uid"][uid].name for uid, entries in seen.items() if entries}
    assert len(seen) == len(shapes) and kept == {"claims", "inline-nfs", "inline-csi"}


def test_the_first_list_files_each_page_as_it_comes_and_a_list_begun_again_replaces_what_it_filed(
        cluster, unique, monkeypatch):
    """The first list of PVs, two a page, files each page before reading the next (nothing whole is claimed: synced
    only after the last); its connection breaks on the second page, and the list begun again ends with exactly what
    one whole list files, each PV told to the listeners once."""
    client = api_client(str(cluster.kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    names = [f"mw-pages-{unique}-{n}" for n in range(5)]
    for name in names:
        core.create_persistent_volume({
            "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": f"pages-{unique}-v1", "claimRef": {"namespace": "default", "name": name},
                     "nfs": {"server": "nas", "path": f"/{name}"}}})
    monkeypatch.setattr(watches, "PAGE_SIZE", 2)
    monkeypatch.setattr(watches, "RETRY_SECONDS", 0.1)
    volumes = cluster_watches(client).volumes
    reduce_page = volumes.reduce_page
    seen: list[tuple[int, bool]] = []  # (objects filed, synced) as each page arrives

    def breaking_once(data: bytes):
        seen.append((len(volumes), volumes.synced.is_set()))
        if len(seen) == 2:
            raise ConnectionResetError("the connection broke on the second page")
        return reduce_page(data)

    volumes.reduce_page = breaking_once
    told: list[str] = []
    volumes.listeners.append(lambda uid, before, after: told.append(uid) if not before else None)
    try:
        volumes.start()
        assert volumes.synced.wait(30)
        # The first attempt filed its first page (two PVs, each filing something) before it read the second.
        assert seen[:2] == [(0, False), (2, False)]
        whole, _, _ = reduce_json_page(core.list_persistent_volume(_preload_content=False).data, volumes.reduce)
        mine = {uid for uid, entries in whole.items() if entries.get("claims_by_volume", {}).keys() & set(names)}
        assert len(mine) == len(names)
        assert {uid: volumes.entries_of(uid) for uid in mine} == {uid: whole[uid] for uid in mine}
        assert sorted(uid for uid in told if uid in mine) == sorted(mine)
    finally:
        volumes.stop()
        for name in names:
            core.delete_persistent_volume(name)
