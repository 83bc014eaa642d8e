"""Shared pieces of the API types: camelCase on the wire, Kubernetes-style conditions and selectors."""

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

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


class LabelSelectorRequirement(ApiModel):
    key: str = Field(description="The label key the requirement applies to.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[str] = Field(default_factory=list, description="Values for In and NotIn; empty otherwise.")


class LabelSelector(ApiModel):
    """A Kubernetes label selector; an empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, description="Labels that must all be present.")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Requirements that must all hold."
    )


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
