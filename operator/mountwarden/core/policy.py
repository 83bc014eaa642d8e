"""A profile's declared mount policy, resolved into one set of effective options.

Layers, each overriding the one before: the AWS EFS baseline (when the backend
is EFS), the cache-policy preset, the profile's own ``mountOptions``. Required
and forbidden options are then checked against the result, so a profile that
contradicts itself is refused before any StorageClass is touched.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from mountwarden.core.compare import forbidden_violations
from mountwarden.core.options import (
    NormalizedOptions,
    Severity,
    effective_value,
    format_canonical,
    layer,
    normalize,
)
from mountwarden.core.optiontable import BY_NAME, OptionValue, exclusive_group
from mountwarden.core.presets import EFS_BASELINE, PRESETS, CachePolicy, is_efs


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """A problem in a profile's spec, located by its field path (``spec.mountOptions[1]``)."""

    field: str
    message: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class ResolvedPolicy:
    options: dict[str, OptionValue]
    errors: tuple[SpecProblem, ...]
    warnings: tuple[SpecProblem, ...]

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def mount_options(self) -> list[str]:
        return NormalizedOptions(self.options).mount_options


def _located(field: str, normalized: NormalizedOptions) -> tuple[list[SpecProblem], list[SpecProblem]]:
    errors = [SpecProblem(field, p.message) for p in normalized.errors]
    warnings = [SpecProblem(field, p.message, Severity.WARNING) for p in normalized.warnings]
    return errors, warnings


def resolve_policy(
    *,
    provisioner: str,
    cache_policy: str | None,
    mount_options: Sequence[str] = (),
    required_options: Sequence[str] = (),
    forbidden_options: Sequence[str] = (),
) -> ResolvedPolicy:
    errors: list[SpecProblem] = []
    warnings: list[SpecProblem] = []
    layers: list[dict[str, OptionValue]] = []
    if is_efs(provisioner):
        layers.append(normalize(EFS_BASELINE).options)
    if cache_policy is not None:
        preset = PRESETS.get(CachePolicy(cache_policy)) if cache_policy in CachePolicy._value2member_map_ else None
        if preset is None:
            errors.append(SpecProblem("spec.cachePolicy", f"unknown cache policy '{cache_policy}': use one of "
                                                          f"{', '.join(p.value for p in CachePolicy)}."))
        else:
            layers.append(normalize(preset.options).options)
    for index, entry in enumerate(mount_options):
        normalized = normalize(entry)
        located_errors, located_warnings = _located(f"spec.mountOptions[{index}]", normalized)
        errors += located_errors
        warnings += located_warnings
    # Overrides are one option string as the kernel sees it: contradictions across entries count too.
    overrides = normalize(list(mount_options))
    if not errors:
        errors += _located("spec.mountOptions", overrides)[0]
    layers.append(overrides.options)
    effective = layer(*layers)

    for index, token in enumerate(required_options):
        field = f"spec.requiredOptions[{index}]"
        normalized = normalize(token)
        problems = _located(field, normalized)
        errors += problems[0]
        contradicting = [
            _describe(effective, name)
            for name, value in normalized.options.items()
            if effective_value(effective, name) != (True if exclusive_group(name) else value)
        ]
        if contradicting:  # one error per requirement, however many options it stands for
            errors.append(SpecProblem(field, f"'{token}' is required, but the effective options "
                                             f"({','.join(contradicting)}) contradict it: change the preset or "
                                             "spec.mountOptions, or drop the requirement."))
    for index, token in enumerate(forbidden_options):
        field = f"spec.forbiddenOptions[{index}]"
        if not normalize(token).options and token not in BY_NAME:
            errors += _located(field, normalize(token))[0]
    for token, held in forbidden_violations(forbidden_options, effective):
        index = list(forbidden_options).index(token)
        errors.append(SpecProblem(f"spec.forbiddenOptions[{index}]",
                                  f"'{token}' is forbidden, but the effective options set {held}: change the preset "
                                  "or spec.mountOptions, or lift the ban."))
    return ResolvedPolicy(effective, tuple(errors), tuple(warnings))


def _describe(effective: dict[str, OptionValue], name: str) -> str:
    members = exclusive_group(name)
    if members is not None:
        return next((m for m in members if effective.get(m)), members[0])
    value = effective_value(effective, name)
    return format_canonical(name, value) if value is not None else f"no {name}"
