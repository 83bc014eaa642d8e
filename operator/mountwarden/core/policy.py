"""A profile's declared mount policy, resolved into one set of effective options.

Layers, each overriding the one before: the AWS EFS baseline (when the backend
is EFS), the cache-policy preset, the profile's own ``mountOptions``. Required
and forbidden options are then checked against the result, so a profile that
contradicts itself is refused before any StorageClass is touched.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from mountwarden.core.options.compare import forbidden_violations
from mountwarden.core.options.effects import EFS_METERING, Cost, cost_phrase, credit_costs
from mountwarden.core.options.normalize import (
    NormalizedOptions,
    Severity,
    effective_value,
    format_canonical,
    layer,
    normalize,
)
from mountwarden.core.options.presets import CHEAPER_PRESETS, EFS_BASELINE, current_names, is_efs, preset_of
from mountwarden.core.options.table import BY_NAME, OptionValue, exclusive_group
from mountwarden.core.vocabulary import BackendKind, SqlitePolicy


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


def backend_kind(provisioner: str, kind: str | None = None) -> BackendKind:
    """What serves the volumes: as declared, else efs for the EFS CSI driver and nfs for anything else."""
    return BackendKind(kind) if kind else (BackendKind.EFS if is_efs(provisioner) else BackendKind.NFS)


def resolve_policy(
    *,
    provisioner: str,
    cache_policy: str | None,
    mount_options: Sequence[str] = (),
    required_options: Sequence[str] = (),
    forbidden_options: Sequence[str] = (),
    kind: str | None = None,
    sqlite: SqlitePolicy = SqlitePolicy.WARN,
) -> ResolvedPolicy:
    """The effective options of a profile, and what is wrong with them, located by field.

    ``kind`` is spec.backend.kind (efs, nfs, nfsv3-gateway; None: from the provisioner) and ``sqlite``
    spec.sqlite: an NFSv3-only gateway is checked for what it needs, and for locks that stay on a node.
    """
    errors: list[SpecProblem] = []
    warnings: list[SpecProblem] = []
    layers: list[dict[str, OptionValue]] = []
    kind = backend_kind(provisioner, kind)
    if kind == BackendKind.EFS:
        layers.append(normalize(EFS_BASELINE).options)
    if cache_policy is not None:
        found = preset_of(cache_policy)
        if found is None:
            errors.append(SpecProblem("spec.cachePolicy", f"unknown cache policy '{cache_policy}': use one of "
                                                          f"{', '.join(current_names())}."))
        else:
            preset, deprecation = found
            layers.append(normalize(preset.options).options)
            if deprecation is not None:
                warnings.append(SpecProblem("spec.cachePolicy", deprecation.warning(), Severity.WARNING))
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
    if kind == BackendKind.NFSV3_GATEWAY:
        gateway_errors, gateway_warnings = _check_gateway(effective, sqlite)
        errors += gateway_errors
        warnings += gateway_warnings
    if kind == BackendKind.EFS and not errors:
        warnings += _metered_round_trips(effective, layer(*layers[:-1]))
    return ResolvedPolicy(effective, tuple(errors), tuple(warnings))


def _metered_round_trips(options: dict[str, OptionValue], preset: dict[str, OptionValue]) -> list[SpecProblem]:
    """On EFS, options that make every stat(), open() or write() a metered round trip: said whatever the credits.

    ``preset`` is the options without spec.mountOptions, to name the field that asks for them. The burst
    credits only sharpen it: a PVC of such a profile on a Bursting file system is warned again
    (StrictOnBursting), with what it costs the credits.
    """
    costly = credit_costs(options)
    if not costly:
        return []
    costs = Cost.NONE
    for _, cost in costly:
        costs |= cost
    field = "spec.cachePolicy" if credit_costs(preset) == costly else "spec.mountOptions"
    names = ", ".join(name for name, _ in costly)
    return [SpecProblem(field, f"on EFS {names} make {cost_phrase(costs)}, each {EFS_METERING}, whatever the file "
                               "system's credits or throughput mode (sync,actimeo=0,lookupcache=none made the "
                               f"incident's import take 8 hours); {CHEAPER_PRESETS}.", Severity.WARNING)]


def _check_gateway(options: dict[str, OptionValue], sqlite: str) -> tuple[list[SpecProblem], list[SpecProblem]]:
    """An NFSv3-only gateway without rpcbind: every port named, and locks that stay on the node said plainly."""
    errors, warnings = [], []
    field = "spec.mountOptions"
    version = effective_value(options, "vers")
    if version != "3":
        errors.append(SpecProblem(field, f"an nfsv3-gateway serves NFSv3 only, but the options ask for "
                                         f"{'vers=' + str(version) if version else 'no version (the client tries v4 first)'}: "
                                         "add vers=3."))
    missing = [name for name in ("port", "mountport") if name not in options]
    if missing:
        errors.append(SpecProblem(field, f"an nfsv3-gateway runs no rpcbind, so the client cannot look up its "
                                         f"ports: add {' and '.join(f'{name}=<port>' for name in missing)} "
                                         "(the gateway's NFS and MOUNT ports, often 2049 and 20048)."))
    read_only = bool(effective_value(options, "ro"))
    if effective_value(options, "lock") is not False:
        warnings.append(SpecProblem(field, "an nfsv3-gateway runs no rpcbind, and NFSv3 locking needs it (the "
                                           "lock manager and statd are found through rpcbind): in the kernel lab, with "
                                           "rpcbind stopped, a v3 mount without nolock was refused (its lock manager "
                                           "could not register with rpcbind). Add nolock"
                                           + ("." if read_only else
                                              ", and keep SQLite off the volume (sqlite: forbid).")))
    elif not read_only and sqlite != SqlitePolicy.FORBID:
        warnings.append(SpecProblem(field, "nolock keeps locks on each node: two nodes can write one SQLite database "
                                           "at once and corrupt it (kernel lab: a second NFSv3 client with nolock is "
                                           "granted the same lock). Mount read-only (ro), where nolock is no hazard, "
                                           "or set spec.sqlite: forbid."))
    return errors, warnings


def _describe(effective: dict[str, OptionValue], name: str) -> str:
    members = exclusive_group(name)
    if members is not None:
        return next((m for m in members if effective.get(m)), members[0])
    value = effective_value(effective, name)
    return format_canonical(name, value) if value is not None else f"no {name}"
