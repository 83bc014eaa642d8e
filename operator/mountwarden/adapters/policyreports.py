"""Policy reports of one group on the API (wgpolicyk8s.io PolicyReports and ClusterPolicyReport, or openreports.io
Reports and ClusterReport): whether they are served, which ones mountwarden wrote, and writing or deleting one
whole report (the core builds them: mountwarden.core.policyreport)."""

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.kube import transient_errors
from mountwarden.core.policyreport import LABELS, REPORT_NAME, ReportApi, ReportKey

_SELECTOR = ",".join(f"{key}={value}" for key, value in LABELS.items())


class PolicyReports:
    def __init__(self, client: ApiClient, api: ReportApi) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.api = api

    def served(self) -> bool:
        """Whether the API server serves both of the group's report resources (the discovery document)."""
        try:
            with transient_errors():
                resources = self.custom.get_api_resources(self.api.group, self.api.version).resources
        except ApiException as error:
            if error.status != 404:
                raise
            resources = []
        return {self.api.plural, self.api.cluster_plural} <= {resource.name for resource in resources}

    def existing(self) -> list[ReportKey]:
        """The reports mountwarden wrote (by their label): namespaces, and None for the cluster-wide one."""
        group, version = self.api.group, self.api.version
        with transient_errors():
            namespaced = self.custom.list_cluster_custom_object(group, version, self.api.plural,
                                                                label_selector=_SELECTOR)["items"]
            cluster = self.custom.list_cluster_custom_object(group, version, self.api.cluster_plural,
                                                             label_selector=_SELECTOR)["items"]
        keys: list[ReportKey] = [item["metadata"]["namespace"] for item in namespaced
                                 if item["metadata"]["name"] == REPORT_NAME]
        return keys + [None for item in cluster if item["metadata"]["name"] == REPORT_NAME]

    def write(self, key: ReportKey, body: dict) -> None:
        """Create the report, or replace its results and summary (a merge patch replaces lists whole)."""
        group, version = self.api.group, self.api.version
        change = {"metadata": {"labels": body["metadata"]["labels"]}, "summary": body["summary"],
                  "results": body["results"]}
        try:
            with transient_errors():
                if key is None:
                    self.custom.patch_cluster_custom_object(group, version, self.api.cluster_plural, REPORT_NAME,
                                                            change)
                else:
                    self.custom.patch_namespaced_custom_object(group, version, key, self.api.plural, REPORT_NAME,
                                                               change)
            return
        except ApiException as error:
            if error.status != 404:
                raise
        with transient_errors():
            if key is None:
                self.custom.create_cluster_custom_object(group, version, self.api.cluster_plural, body)
            else:
                self.custom.create_namespaced_custom_object(group, version, key, self.api.plural, body)

    def delete(self, key: ReportKey) -> None:
        """Delete the report; one already gone (or its namespace) is fine."""
        group, version = self.api.group, self.api.version
        try:
            with transient_errors():
                if key is None:
                    self.custom.delete_cluster_custom_object(group, version, self.api.cluster_plural, REPORT_NAME)
                else:
                    self.custom.delete_namespaced_custom_object(group, version, key, self.api.plural, REPORT_NAME)
        except ApiException as error:
            if error.status != 404:
                raise
