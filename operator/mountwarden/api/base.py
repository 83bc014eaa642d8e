"""Shared pieces of the API types: camelCase on the wire, Kubernetes-style conditions and selectors."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from mountwarden.core.selectors import LABEL_VALUE_MAX, match_labels_problems, requirement_problems

GROUP = "mountwarden.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class ApiModel(BaseModel):
    """Python names in snake_case, Kubernetes names in camelCase; unknown fields are refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def to_wire(self) -> dict:
        """The JSON shape the Kubernetes API stores (camelCase, no unset optional fields)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


#: The API server's own patterns (k8s.io/apimachinery validation), so that the CRD refuses what a webhook
#: configuration or a list call would refuse later; mountwarden.core.selectors checks the same, exactly.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_KEY_MAX = 253 + 1 + LABEL_VALUE_MAX
LabelKey = Annotated[str, Field(max_length=LABEL_KEY_MAX, pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=LABEL_VALUE_PATTERN)]
#: Bounds that keep a selector small, and the CEL rules over it cheap enough for the API server to accept.
SELECTOR_MAX_ITEMS = 64
SELECTOR_MAX_VALUES = 256

_VALUES_RULE = {
    "rule": "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) "
            ": (!has(self.values) || size(self.values) == 0)",
    "message": "operators In and NotIn need at least one value; Exists and DoesNotExist take none",
}
_MATCH_LABELS_RULE = {
    "rule": f"self.all(key, size(key) <= {LABEL_KEY_MAX} && key.matches({LABEL_KEY_PATTERN!r}))",
    "message": "every matchLabels key must be a label key: [a DNS subdomain/]a name of at most 63 alphanumerics, "
               "'-', '_' and '.', beginning and ending with an alphanumeric",
}


class LabelSelectorRequirement(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_VALUES_RULE]})

    key: LabelKey = Field(description="The label key the requirement applies to.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[LabelValue] = Field(default_factory=list, max_length=SELECTOR_MAX_VALUES,
                                     description="Values for In and NotIn; empty otherwise.")

    @model_validator(mode="after")
    def _as_the_api_server_would(self) -> "LabelSelectorRequirement":
        problems = requirement_problems(self.key, str(self.operator), self.values)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class LabelSelector(ApiModel):
    """A Kubernetes label selector; an empty selector matches everything."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict, max_length=SELECTOR_MAX_ITEMS, description="Labels that must all be present.",
        json_schema_extra={"x-kubernetes-validations": [_MATCH_LABELS_RULE]})
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=SELECTOR_MAX_ITEMS, description="Requirements that must all hold."
    )

    @field_validator("match_labels")
    @classmethod
    def _keys_as_the_api_server_would(cls, labels: dict[str, str]) -> dict[str, str]:
        problems = match_labels_problems(labels)
        if problems:
            raise ValueError("; ".join(problems))
        return labels


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition (the shape of metav1.Condition)."""

    type: str = Field(description="What the condition is about, e.g. Ready.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase word a program can switch on.")
    message: str = Field(default="", description="What happened and, when something is wrong, how to fix it.")
    last_transition_time: datetime = Field(description="When the status last changed.")
    observed_generation: int | None = Field(default=None, description="The spec generation this reflects.")
