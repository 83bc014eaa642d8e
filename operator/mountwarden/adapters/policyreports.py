"""PolicyReports and the ClusterPolicyReport on the API: whether they are served, which ones mountwarden wrote,
and writing or deleting one whole report (the core builds them: mountwarden.core.policyreport)."""

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.kube import transient_errors
from mountwarden.core.policyreport import API_GROUP, API_VERSION, LABELS, REPORT_NAME, ReportKey

PLURALS = {"namespaced": "policyreports", "cluster": "clusterpolicyreports"}
_SELECTOR = ",".join(f"{key}={value}" for key, value in LABELS.items())


class PolicyReports:
    def __init__(self, client: ApiClient) -> None:
        self.api = kubernetes.client.CustomObjectsApi(client)

    def missing_resources(self) -> list[str]:
        """The report resources the API server does not serve (their CRDs are not installed); [] when both are."""
        try:
            with transient_errors():
                resources = self.api.get_api_resources(API_GROUP, API_VERSION).resources
        except ApiException as error:
            if error.status != 404:
                raise
            resources = []
        served = {resource.name for resource in resources}
        return [f"{plural}.{API_GROUP}/{API_VERSION}" for plural in PLURALS.values() if plural not in served]

    def existing(self) -> list[ReportKey]:
        """The reports mountwarden wrote (by their label): namespaces, and None for the cluster-wide one."""
        with transient_errors():
            namespaced = self.api.list_cluster_custom_object(API_GROUP, API_VERSION, PLURALS["namespaced"],
                                                             label_selector=_SELECTOR)["items"]
            cluster = self.api.list_cluster_custom_object(API_GROUP, API_VERSION, PLURALS["cluster"],
                                                          label_selector=_SELECTOR)["items"]
        keys: list[ReportKey] = [item["metadata"]["namespace"] for item in namespaced
                                 if item["metadata"]["name"] == REPORT_NAME]
        return keys + [None for item in cluster if item["metadata"]["name"] == REPORT_NAME]

    def write(self, key: ReportKey, body: dict) -> None:
        """Create the report, or replace its results and summary (a merge patch replaces lists whole)."""
        change = {"metadata": {"labels": body["metadata"]["labels"]}, "summary": body["summary"],
                  "results": body["results"]}
        try:
            with transient_errors():
                if key is None:
                    self.api.patch_cluster_custom_object(API_GROUP, API_VERSION, PLURALS["cluster"], REPORT_NAME, change)
                else:
                    self.api.patch_namespaced_custom_object(API_GROUP, API_VERSION, key, PLURALS["namespaced"],
                                                            REPORT_NAME, change)
            return
        except ApiException as error:
            if error.status != 404:
                raise
        with transient_errors():
            if key is None:
                self.api.create_cluster_custom_object(API_GROUP, API_VERSION, PLURALS["cluster"], body)
            else:
                self.api.create_namespaced_custom_object(API_GROUP, API_VERSION, key, PLURALS["namespaced"], body)

    def delete(self, key: ReportKey) -> None:
        """Delete the report; one already gone (or its namespace) is fine."""
        try:
            with transient_errors():
                if key is None:
                    self.api.delete_cluster_custom_object(API_GROUP, API_VERSION, PLURALS["cluster"], REPORT_NAME)
                else:
                    self.api.delete_namespaced_custom_object(API_GROUP, API_VERSION, key, PLURALS["namespaced"],
                                                             REPORT_NAME)
        except ApiException as error:
            if error.status != 404:
                raise
