"""Kubernetes label selectors, evaluated on plain dictionaries."""


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
