"""What the code exports to Prometheus, and which metrics a PromQL expression reads: for the tests that tie the
chart's dashboard (and alerts) to the code, so that a renamed metric cannot leave a panel silently empty."""

from __future__ import annotations

import re

#: Words of PromQL that look like metric names and are not.
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                      "offset", "inf", "nan"})
#: Modifiers whose parenthesised list holds label names, not expressions.
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|[A-Za-z_:][A-Za-z0-9_:]*|\d[\w.]*|\S')


def metric_names(expression: str) -> set[str]:
    """The metric names an expression selects (not its functions, keywords, labels, durations or strings).

    Grafana's label_values(metric, label) counts as a selector of ``metric``.
    """
    tokens = _TOKEN.findall(expression)
    names: set[str] = set()
    braces = brackets = 0
    label_list_depth: int | None = None  # the paren depth of a by (...) / on (...) list we are inside
    depth = 0
    previous = ""
    for index, token in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else ""
        if token == "{":
            braces += 1
        elif token == "}":
            braces -= 1
        elif token == "[":
            brackets += 1
        elif token == "]":
            brackets -= 1
        elif token == "(":
            depth += 1
            if previous.lower() in LABEL_LISTS:
                label_list_depth = depth
        elif token == ")":
            if label_list_depth == depth:
                label_list_depth = None
            depth -= 1
        elif (re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token) and not braces and not brackets
              and label_list_depth is None and token.lower() not in KEYWORDS
              and following != "(" and following.lower() not in ("by", "without")  # a function, an aggregation
              and not (previous == "," and _inside_label_values(tokens, index))):
            names.add(token)
        previous = token
    return names


def _inside_label_values(tokens: list[str], index: int) -> bool:
    """Whether tokens[index] is the label argument of label_values(metric, label)."""
    return index >= 4 and tokens[index - 4] == "label_values" and tokens[index - 3] == "("


def selector_labels(expression: str) -> dict[str, set[str]]:
    """Per metric, the label names its matchers use; under the key "" the labels of by/without/on/ignoring
    clauses (they must exist on the metrics around them)."""
    labels: dict[str, set[str]] = {}
    for metric, matchers in re.findall(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}", expression):
        labels.setdefault(metric, set()).update(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    grouping = re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expression)
    labels[""] = {label.strip() for clause in grouping for label in clause.split(",") if label.strip()}
    return labels


def operator_metric_labels() -> dict[str, tuple[str, ...]]:
    """Every metric the operator exports (its family name) and its label names."""
    from prometheus_client import REGISTRY

    import mountwarden.handlers.metrics  # noqa: F401  (registers the operator's gauges)

    return {family.name: tuple(getattr(collector, "_labelnames", ()))
            for collector in list(REGISTRY._collector_to_names) if hasattr(collector, "describe")
            for family in collector.describe() if family.name.startswith("mountwarden_")}


def agent_metric_labels() -> dict[str, tuple[str, ...]]:
    """Every metric an agent exports (its family name) and its label names; its per-volume collectors name their
    labels in LABELS."""
    from mountwarden.agent.metrics import AgentMetrics

    registry = AgentMetrics("node").registry
    labels = {name: tuple(collector._labelnames) for collector, names in registry._collector_to_names.items()
              if hasattr(collector, "_labelnames") for name in names}
    labels.update({family.name: tuple(collector.LABELS) for collector in registry._collector_to_names
                   if hasattr(collector, "LABELS") for family in collector.collect()})
    return {name: names for name, names in labels.items() if name.startswith("mountwarden_")}


def exported_series() -> set[str]:
    """Every series name the operator and the agent export, with the suffixes Prometheus sees."""
    from prometheus_client import REGISTRY

    import mountwarden.handlers.metrics  # noqa: F401  (registers the operator's gauges)
    from mountwarden.agent.metrics import AgentMetrics

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
    names = set()
    for registry in (REGISTRY, AgentMetrics("node").registry):
        for family in registry.collect():
            if family.name.startswith("mountwarden_"):
                names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names
