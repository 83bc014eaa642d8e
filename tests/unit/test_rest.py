"""Requests by path (mountwarden.adapters.rest): the paths the API server serves, and what the operator imports."""

import json
import subprocess
import sys

from mountwarden.adapters.rest import path


def test_core_kinds_live_under_api_v1_and_the_others_under_their_group():
    assert path("v1", "persistentvolumes") == "/api/v1/persistentvolumes"
    assert path("v1", "pods", namespace="shop") == "/api/v1/namespaces/shop/pods"
    assert path("apps/v1", "deployments", "web", namespace="shop") == "/apis/apps/v1/namespaces/shop/deployments/web"
    assert path("storage.k8s.io/v1", "storageclasses", "fast-v2") == "/apis/storage.k8s.io/v1/storageclasses/fast-v2"


def test_a_subresource_follows_the_name_and_names_are_quoted_whole():
    assert path("v1", "pods", "web-0", namespace="shop", subresource="eviction") == \
        "/api/v1/namespaces/shop/pods/web-0/eviction"
    # A name is one segment: a slash in it (never valid, but given) cannot reach another resource.
    assert path("v1", "pods", "a/../b", namespace="x") == "/api/v1/namespaces/x/pods/a%2F..%2Fb"


#: Builds every adapter the operator's process uses, as handlers/runner.run and the handlers do, then lists the
#: typed API classes of the kubernetes client that got imported. No request is sent.
OPERATOR_ADAPTERS = """
import json, sys
from kubernetes.client import ApiClient, Configuration
from mountwarden.adapters.kube import ProfileConditions, StorageClasses
from mountwarden.adapters.webhookconfig import ActivePodLabel, WebhookRegistrar
from mountwarden.adapters.workloads import ClusterWorkloads
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.indexes import cluster_watches
from mountwarden.handlers.runner import register_handlers

client = ApiClient(Configuration(host="https://127.0.0.1:1"))
register_handlers(OperatorConfig())
cluster_watches(client)
StorageClasses(client)
ProfileConditions(client, "mountwarden.io", "v1alpha1", "storageprofiles", "StorageProfile")
ClusterWorkloads(client)
WebhookRegistrar(client, ["kube-system"])
ActivePodLabel(client, namespace="mw", pod="mw-0", key="mountwarden.io/active")
print(json.dumps(sorted(name for name in sys.modules if name.startswith("kubernetes.client.api."))))
"""
#: The same for the node agent's adapters.
AGENT_ADAPTERS = """
import json, sys
from kubernetes.client import ApiClient, Configuration
from mountwarden.agent.pods import NodePods
from mountwarden.agent.report import ReportWriter

client = ApiClient(Configuration(host="https://127.0.0.1:1"))
NodePods(client, "node-1", on_change=print)
ReportWriter(client, "node-1")
print(json.dumps(sorted(name for name in sys.modules if name.startswith("kubernetes.client.api."))))
"""


def test_the_operator_and_the_agent_import_no_typed_api_class_but_the_generic_one():
    # CoreV1Api alone imports 244 modules, 20 MiB of the operator's memory (mountwarden.adapters.rest).
    for adapters in (OPERATOR_ADAPTERS, AGENT_ADAPTERS):
        done = subprocess.run([sys.executable, "-c", adapters], capture_output=True, text=True, check=True)
        assert json.loads(done.stdout.splitlines()[-1]) == ["kubernetes.client.api.custom_objects_api"]
