"""Reference documentation generated from the API models (the same source as the CRDs)."""

import types
import typing
from enum import Enum

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

HEADER = "<!-- Generated from operator/mountwarden/api by `mountwarden docs` (make docs). Do not edit. -->\n\n"


def _unwrap(annotation: typing.Any) -> list[typing.Any]:
    """The non-None members of an annotation (X | None -> [X])."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def _type_name(annotation: typing.Any) -> str:
    parts = []
    for member in _unwrap(annotation):
        origin = typing.get_origin(member)
        if origin is list:
            parts.append(f"[]{_type_name(typing.get_args(member)[0])}")
        elif origin is dict:
            parts.append(f"map[string]{_type_name(typing.get_args(member)[1])}")
        elif isinstance(member, type) and issubclass(member, BaseModel):
            parts.append(f"[{member.__name__}](#{member.__name__.lower()})")
        elif isinstance(member, type) and issubclass(member, Enum):
            parts.append(" \\| ".join(f"`{item.value}`" for item in member))
        else:
            parts.append({str: "string", int: "integer", float: "number", bool: "boolean"}.get(
                member, getattr(member, "__name__", str(member))).replace("datetime", "date-time"))
    return " or ".join(parts)


def _nested_models(annotation: typing.Any) -> list[type[BaseModel]]:
    found = []
    for member in _unwrap(annotation):
        for candidate in (member, *typing.get_args(member)):
            for inner in _unwrap(candidate):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    found.append(inner)
    return found


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default is PydanticUndefined or field.default is None:
        return ""
    value = field.default.value if isinstance(field.default, Enum) else field.default
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def model_reference(title: str, intro: str, root: type[BaseModel], *others: type[BaseModel]) -> str:
    """A Markdown page: one table per model reachable from ``root`` (and ``others``), in discovery order."""
    lines = [HEADER + f"# {title}", "", intro, ""]
    seen: list[type[BaseModel]] = []
    queue = [root, *others]
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.append(model)
        lines += [f"## {model.__name__}", ""]
        if model.__doc__ and model.__doc__.strip() and "Usage docs" not in model.__doc__:
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| field | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            wire = field.alias or name
            description = " ".join((field.description or "").split()).replace("|", "\\|")
            lines.append(f"| `{wire}` | {_type_name(field.annotation)} | {_default(field)} | {description} |")
            queue += [nested for nested in _nested_models(field.annotation) if nested not in seen]
        lines.append("")
    return "\n".join(lines)
