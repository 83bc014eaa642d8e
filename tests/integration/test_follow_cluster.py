"""The operator's start: the first lists of pods, PVs and claims, and what they filed kept out of the collector's walks."""

import asyncio
import gc
import logging

import kopf
import kubernetes
import pytest

from mountwarden.adapters.kube import api_client
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
        filed = memo.watches.volumes._filed[created.metadata.uid]  # what the first list of PVs filed for it
        assert gc.is_tracked(filed)
        assert gc.get_freeze_count() > frozen_before
        # gc.get_objects() lists what a collection walks: the generations, not the frozen objects.
        assert not any(obj is filed for obj in gc.get_objects())
    finally:
        thaw_everything()
        memo.watches.stop()
        core.delete_persistent_volume(PV)
