"""Requests to the Kubernetes API by path, through the official client's ApiClient, answered as JSON.

The kubernetes client's typed API classes (CoreV1Api, AppsV1Api, ...) are generated pydantic code: the first use of
CoreV1Api imports 244 modules of models and call validators, 20 MiB of resident memory, and the seven classes the
operator used cost it 36 MiB of the 120 MiB it holds idle (measured 2026-12-06, kubernetes 37.0.1), for answers it
reads as JSON anyway (``_preload_content=False``). ``Rest`` sends the same requests by path through the same
ApiClient (its kubeconfig, authentication, TLS, retries and timeouts) and raises the client's own ApiException
subclasses for a refusal, as the typed calls do.
"""

import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import kubernetes
import urllib3
from kubernetes.client import ApiClient, ApiException

#: Content types of a PATCH: a strategic merge of an object (what the typed calls sent for a dict; built-in kinds
#: only), a list of JSON patch operations, a server-side apply.
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

Query = Mapping[str, str | int | bool | None]

#: Bytes asked of the connection at a time when reading an answer whole (Rest.raw).
READ_CHUNK_BYTES = 64 * 1024


def path(api_version: str, plural: str, name: str | None = None, *, namespace: str | None = None,
         subresource: str | None = None) -> str:
    """``/api/v1/namespaces/ns/pods/name/eviction`` from its parts: "v1" is the core group, "apps/v1" a named one."""
    parts = ["/api/v1" if api_version == "v1" else f"/apis/{api_version}"]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


class WatchEnded(RuntimeError):
    """The API server ended a watch with an ERROR event: the caller lists again."""


class Rest:
    """GET, POST, PATCH and DELETE by path; the answers decoded from JSON (``raw`` leaves them as bytes)."""

    def __init__(self, client: ApiClient | None) -> None:
        self.client = client if client is not None else ApiClient()

    def response(self, method: str, resource_path: str, *, query: Query | None = None, body: Any = None,
                 content_type: str | None = None, timeout: float | None = None) -> urllib3.BaseHTTPResponse:
        """The answer, its body not read yet (a watch reads it as it comes); a refusal raises ApiException."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.client.param_serialize(
            method=method, resource_path=resource_path, header_params=headers, body=body,
            query_params=[(key, value) for key, value in (query or {}).items() if value is not None],
            auth_settings=["BearerToken"])
        answer = self.client.call_api(*request, _request_timeout=timeout)
        if not 200 <= answer.status <= 299:
            answer.read()
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return answer.response

    def raw(self, method: str, resource_path: str, **options) -> bytearray:
        """The answer's body, undecoded.

        Read into one growing buffer: urllib3's ``data`` gathers a chunked answer's pieces and then joins them, so
        a list of megabytes (a rollout's 5,000 PVs are 7.8 MB of JSON) was held twice at its end. Grown in place (a
        block that large is mapped apart, and glibc remaps it), the buffer holds it about once."""
        answer = self.response(method, resource_path, **options)
        try:
            body = bytearray()
            for chunk in answer.stream(READ_CHUNK_BYTES):
                body += chunk
            return body
        finally:
            answer.release_conn()

    def call(self, method: str, resource_path: str, **options) -> Any:
        data = self.raw(method, resource_path, **options)
        return json.loads(data) if data else None

    def get(self, resource_path: str, *, query: Query | None = None, timeout: float | None = None) -> Any:
        return self.call("GET", resource_path, query=query, timeout=timeout)

    def post(self, resource_path: str, body: Any, *, query: Query | None = None, timeout: float | None = None) -> Any:
        return self.call("POST", resource_path, body=body, query=query, timeout=timeout)

    def patch(self, resource_path: str, body: Any, *, content_type: str = STRATEGIC_MERGE, query: Query | None = None,
              timeout: float | None = None) -> Any:
        return self.call("PATCH", resource_path, body=body, content_type=content_type, query=query, timeout=timeout)

    def delete(self, resource_path: str, *, timeout: float | None = None) -> Any:
        return self.call("DELETE", resource_path, timeout=timeout)

    def watch(self, watcher: kubernetes.watch.Watch, resource_path: str, *, resource_version: str,
              timeout_seconds: int, query: Query | None = None) -> Iterator[dict]:
        """The watch's events from ``resource_version``, each decoded (type and object), bookmarks included;
        ``watcher.stop()`` ends it from another thread. Make ``watcher`` with ``watcher()``. An ERROR event is never
        yielded: it raises WatchEnded (410 Gone among them), and the caller lists again.

        kubernetes.watch.Watch reads the lines of the chunked answer; it is handed a list function that asks this
        path, and leaves the events undecoded (deserialize=False): no model class is looked up or imported."""

        def list_objects(*, resource_version: str, timeout_seconds: int, watch: bool, **_) -> urllib3.BaseHTTPResponse:
            asked = {"watch": watch, "resourceVersion": resource_version, "timeoutSeconds": timeout_seconds,
                     "allowWatchBookmarks": True}
            return self.response("GET", resource_path, query={**(query or {}), **asked})

        try:
            yield from watcher.stream(list_objects, resource_version=resource_version,
                                      timeout_seconds=timeout_seconds, deserialize=False)
        except KeyError as missing:
            # The client reads an ERROR event's raw_object, which it adds only to the events it decodes itself.
            raise WatchEnded(f"the watch of {resource_path} ended with an error event (410 Gone when its "
                             "resourceVersion expired): list again") from missing


def watcher() -> kubernetes.watch.Watch:
    # return_type: the Watch would otherwise look for a model class in the list function's annotations.
    return kubernetes.watch.Watch(return_type="object")
