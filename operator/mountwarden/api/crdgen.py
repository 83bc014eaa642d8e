"""CustomResourceDefinitions generated from the pydantic models: one source of truth for the API.

Kubernetes wants a structural OpenAPI v3 schema: no ``$ref``, a ``type`` on
every node, no ``additionalProperties: false`` next to ``properties`` and no
``null`` types. This module turns pydantic's JSON Schema into that.
"""

from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel

from mountwarden.api.base import GROUP, VERSION

HEADER = "# Generated from operator/mountwarden/api by `mountwarden crds` (make crds). Do not edit.\n"


@dataclass(frozen=True)
class CrdSpec:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel] | None
    printer_columns: tuple[dict[str, Any], ...] = ()
    scope: str = "Cluster"
    spec_required: bool = True
    categories: tuple[str, ...] = field(default=("mountwarden",))
    #: CEL rules on the whole object (x-kubernetes-validations at the root): the only place metadata.name is seen.
    validations: tuple[dict[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**_inline(target, definitions), **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline(merged, definitions)
        return {key: _inline(value, definitions) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    return node


def _structural(node: Any) -> Any:
    """Rewrite one inlined JSON Schema node into Kubernetes' structural dialect."""
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    for combinator in ("anyOf", "oneOf"):
        if combinator in node:
            options = [option for option in node.pop(combinator) if option.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express a union of {options} in a structural schema")
            node = {**options[0], **node}
    node.pop("title", None)
    if node.get("default", "unset") is None or isinstance(node.get("default"), dict | list):
        node.pop("default")
    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")
    if "properties" in node:
        node["type"] = "object"
        node["properties"] = {name: _structural(schema) for name, schema in node["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _structural(node[key])
    if node.get("format") == "date-time":
        node["type"] = "string"
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    return node


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(_inline(raw, raw.get("$defs", {})))


def _mark_condition_lists(node: Any) -> None:
    """Conditions are a map keyed by type, as in every Kubernetes API."""
    if isinstance(node, dict):
        for name, child in (node.get("properties") or {}).items():
            if name == "conditions" and child.get("type") == "array":
                child["x-kubernetes-list-type"] = "map"
                child["x-kubernetes-list-map-keys"] = ["type"]
            _mark_condition_lists(child)
        if isinstance(node.get("items"), dict):
            _mark_condition_lists(node["items"])


def build_crd(spec: CrdSpec) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": schema_of(spec.spec_model),
    }
    if spec.status_model is not None:
        properties["status"] = schema_of(spec.status_model)
    _mark_condition_lists({"properties": properties})
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "description": spec.description,
                "properties": properties,
                **({"required": ["spec"]} if spec.spec_required else {}),
                **({"x-kubernetes-validations": list(spec.validations)} if spec.validations else {}),
            }
        },
    }
    if spec.status_model is not None:
        version["subresources"] = {"status": {}}
    if spec.printer_columns:
        version["additionalPrinterColumns"] = list(spec.printer_columns)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "plural": spec.plural,
                "singular": spec.kind.lower(),
                "shortNames": list(spec.short_names),
                "categories": list(spec.categories),
            },
            "scope": spec.scope,
            "versions": [version],
        },
    }


def render_yaml(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=120)
