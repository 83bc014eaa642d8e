"""Kubernetes label selectors, evaluated on plain dictionaries, and checked as the API server checks them.

The checks follow k8s.io/apimachinery (validation.IsQualifiedName, IsValidLabelValue and
metav1validation.ValidateLabelSelector): a selector the API server would refuse inside a
webhook configuration or a list call is refused here first, naming the field and the fix.
"""

import re
from collections.abc import Mapping

#: A label value, and the name part of a label key: at most 63 characters, alphanumeric at both ends.
LABEL_VALUE_MAX = 63
#: The optional prefix of a label key is a DNS subdomain: at most 253 characters.
LABEL_PREFIX_MAX = 253
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: Operators whose requirement needs values, and those that must have none.
NEEDS_VALUES = ("In", "NotIn")
NO_VALUES = ("Exists", "DoesNotExist")


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None."""
    if value == "":
        return None
    if len(value) > LABEL_VALUE_MAX:
        return f"{value[:20]!r}... is {len(value)} characters long: a label value has at most {LABEL_VALUE_MAX}"
    if not _NAME.match(value):
        return (f"{value!r} is not a label value: alphanumerics, '-', '_' and '.' only, beginning and ending with "
                "an alphanumeric")
    return None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (a qualified name: [prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"label key {key!r} has an empty prefix before '/'"
    if prefix and (len(prefix) > LABEL_PREFIX_MAX or not _DNS_SUBDOMAIN.match(prefix)):
        return (f"label key {key!r}: the prefix {prefix!r} is not a DNS subdomain (lowercase alphanumerics, "
                f"'-' and '.', at most {LABEL_PREFIX_MAX} characters)")
    if not name:
        return f"label key {key!r} has no name"
    if len(name) > LABEL_VALUE_MAX:
        return f"label key {key!r}: its name part is {len(name)} characters long, at most {LABEL_VALUE_MAX}"
    if not _NAME.match(name):
        return (f"label key {key!r}: its name part must be alphanumerics, '-', '_' and '.', beginning and ending "
                "with an alphanumeric")
    return None


def requirement_problems(key: str, operator: str, values: list[str] | tuple[str, ...]) -> list[str]:
    """Why one matchExpressions entry would be refused by the API server (empty: it would not)."""
    problems = []
    if (problem := label_key_problem(key)) is not None:
        problems.append(f"key: {problem}")
    if operator in NEEDS_VALUES and not values:
        problems.append(f"values: operator {operator} needs at least one value: list the values, or use "
                        "Exists/DoesNotExist")
    if operator in NO_VALUES and values:
        problems.append(f"values: operator {operator} takes no values: remove them, or use In/NotIn")
    for index, value in enumerate(values):
        if (problem := label_value_problem(value)) is not None:
            problems.append(f"values[{index}]: {problem}")
    return problems


def match_labels_problems(labels: Mapping[str, str]) -> list[str]:
    """Why a matchLabels map would be refused by the API server (empty: it would not)."""
    problems = []
    for key, value in labels.items():
        if (problem := label_key_problem(key)) is not None:
            problems.append(f"{key}: {problem}")
        if (problem := label_value_problem(value)) is not None:
            problems.append(f"{key}: {problem}")
    return problems


def selector_matches(selector: dict | None, labels: dict[str, str] | None) -> bool:
    """Whether labels satisfy a Kubernetes label selector given in its wire form."""
    if selector is None:
        return True
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
