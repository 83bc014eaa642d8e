"""Declared against observed: what a mount really does compared with its contract.

An option missing from the mount table counts as its kernel default, because
/proc/mounts prints most options only when they differ from the default (and
never prints actimeo). Options the kernel never sees (efs-utils' tls, iam, ...)
cannot be checked from the mount table and are left out.

Options that change what a mount does are checked whether or not the contract
names them (``BEHAVIOUR_OPTIONS``): a ``sync`` nobody declared is drift all the
same, because it is one of the three flags behind the 8-hour import (the incident).
What the contract implies for an option it does not name is the kernel default.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mountwarden.core.findings import CheckResult, Finding, Reason, Severity
from mountwarden.core.options.effects import EFS_METERING, attribute_cache_effect, effect
from mountwarden.core.options.normalize import (
    INHERITED_THROUGH_SUPERBLOCK,
    effective_value,
    format_canonical,
    implied_value,
    normalize,
)
from mountwarden.core.options.table import (
    ATTRIBUTE_CACHE_TIMES,
    BY_NAME,
    Concern,
    OptionValue,
    exclusive_group,
)

_SEVERITY_BY_CONCERN = {
    Concern.CONSISTENCY: Severity.ERROR,
    Concern.DURABILITY: Severity.ERROR,
    Concern.PERFORMANCE: Severity.WARNING,
    Concern.IDENTITY: Severity.INFO,
}

#: What to do about an option in effect that differs from the contract.
REMOUNT = (
    "The mount was made with other options: once the PV's mountOptions (or its StorageClass) carry the "
    "declared ones, restart the pod so that the kubelet mounts the volume again."
)
#: What to do about an option nobody declared.
UNDECLARED_REMEDY = (
    "Remove the option where it comes from (the message says where it most probably does), or declare it in the "
    "profile if it is wanted; then restart the pod so that the kubelet mounts the volume again."
)


def values_said(finding: Finding) -> tuple[str, str]:
    """A finding on one option as (what the contract implies, what is in effect), each in mount syntax."""
    return _value_said(finding.option, finding.expected, "not"), _value_said(finding.option, finding.actual, "no")


def _value_said(option: str | None, value: OptionValue | None, absent: str) -> str:
    if value is None:
        return f"{absent} {option}"
    if isinstance(value, str) and (value in BY_NAME or "=" in value or "," in value):
        return value  # a flag of an exclusive group (hard, soft), or options already written out
    return format_canonical(option, value) if option in BY_NAME else str(value)


def _mismatch(option: str, expected: OptionValue | None, actual: OptionValue | None, severity: Severity,
              message: str) -> Finding:
    """An option in effect that is not what the contract says (information needs no remedy)."""
    return Finding(Reason.OPTION_MISMATCH, severity, message, "" if severity is Severity.INFO else REMOUNT,
                   option=option, expected=expected, actual=actual)


def _checkable(name: str) -> bool:
    spec = BY_NAME.get(name)
    return spec is None or spec.visible_in_mount_table


def _severity(name: str) -> Severity:
    spec = BY_NAME.get(name)
    return _SEVERITY_BY_CONCERN[spec.concern] if spec else Severity.WARNING


def _shown(name: str, value: OptionValue | None) -> str:
    if value is None:
        return f"no {name}"
    return format_canonical(name, value)


def _version_satisfied(expected: OptionValue, actual: OptionValue | None) -> bool:
    # vers=4 asks the client to negotiate the highest 4.x, so any 4.x satisfies it.
    return expected == actual or (expected == "4" and str(actual).startswith("4"))


def compare(declared: Mapping[str, OptionValue], observed: Mapping[str, OptionValue]) -> list[Finding]:
    """One finding per declared option that the observed mount does not have in effect."""
    findings: list[Finding] = []
    for name, expected in declared.items():
        if not _checkable(name):
            continue
        members = exclusive_group(name)
        if members is not None:
            actual_member = next((m for m in members if observed.get(m)), members[0])
            if actual_member != name:
                findings.append(_finding(name, name, actual_member, defaulted=actual_member not in observed))
            continue
        actual = effective_value(observed, name)
        if name == "vers" and _version_satisfied(expected, actual):
            continue
        if actual == expected:
            continue
        if actual is None:
            findings.append(_mismatch(name, expected, None, Severity.INFO,
                                      f"{_shown(name, expected)} is declared but the mount table does not show {name}."))
            continue
        findings.append(_finding(name, expected, actual, defaulted=name not in observed))
    return findings


def _finding(name: str, expected: OptionValue, actual: OptionValue, *, defaulted: bool) -> Finding:
    spec = BY_NAME.get(name)
    if exclusive_group(name) is not None:
        expected_text, actual_text = str(expected), str(actual)
        name_for_value = str(expected)
        expected_value: OptionValue = expected
        actual_value: OptionValue = actual
    else:
        expected_text, actual_text = _shown(name, expected), _shown(name, actual)
        name_for_value = name
        expected_value, actual_value = expected, actual
    source = " (the kernel default)" if defaulted else ""
    why = f" {spec.consequence}" if spec and spec.consequence else ""
    if name in ("rsize", "wsize") and isinstance(actual, int) and isinstance(expected, int) and actual < expected:
        why = " The server negotiated it down: its maximum is lower than declared."
    message = f"declared {expected_text} but the mount has {actual_text}{source}.{why}"
    return _mismatch(name_for_value, expected_value, actual_value, _severity(name), message)


def _in_effect(option_name: str, value: OptionValue, observed: Mapping[str, OptionValue]) -> bool:
    return effective_value(observed, option_name) == (True if exclusive_group(option_name) else value)


def check_required(required: Iterable[str], observed: Mapping[str, OptionValue]) -> list[Finding]:
    """A required option (``hard``, ``vers=4.1``) that is not in effect is an error."""
    findings = []
    for token in required:
        for name, value in normalize(token).options.items():
            if _checkable(name) and not _in_effect(name, value, observed):
                actual = effective_value(observed, name)
                findings.append(_mismatch(name, value, actual, Severity.ERROR,
                                          f"{_shown(name, value)} is required but the mount has "
                                          f"{_shown(name, actual) if not exclusive_group(name) else 'another setting'}."))
    return findings


def forbidden_violations(forbidden: Iterable[str], effective: Mapping[str, OptionValue]) -> list[tuple[str, str]]:
    """The forbidden options in effect, as ``(forbidden token, what holds it)`` pairs.

    A forbidden ``name=value`` (or flag) holds when every option it normalizes to is
    in effect; a bare name of a valued option (``nconnect``) holds when the option is
    set at all.
    """
    violations = []
    for token in forbidden:
        parsed = normalize(token)
        if not parsed.options and token in BY_NAME:
            # actimeo never survives normalization: it stands for the four times it sets.
            names = ATTRIBUTE_CACHE_TIMES if token == "actimeo" else (token,)
            held = [format_canonical(name, effective[name]) for name in names if name in effective]
            if held:
                violations.append((token, ",".join(held)))
            continue
        if parsed.options and all(_in_effect(name, value, effective) for name, value in parsed.options.items()):
            violations.append((token, ",".join(format_canonical(n, v) for n, v in parsed.options.items())))
    return violations


def check_forbidden(forbidden: Iterable[str], observed: Mapping[str, OptionValue]) -> list[Finding]:
    return [
        _mismatch(token, None, held, Severity.ERROR, f"{token} is forbidden by the profile but the mount has {held}.")
        for token, held in forbidden_violations(forbidden, observed)
    ]


# -- options that change behaviour, declared or not -------------------------------------------------

#: Options whose effective value changes what a mount does, whether or not anyone declared them.
BEHAVIOUR_OPTIONS: tuple[str, ...] = (
    "sync", *ATTRIBUTE_CACHE_TIMES, "lookupcache", "cto", "hard", "lock", "local_lock",
)


@dataclass(frozen=True, slots=True)
class OriginHints:
    """What is known of where a mount's options came from, to say where an undeclared one probably did."""

    #: The PV's spec.mountOptions, normalized; None when unknown (a mount checked outside a cluster).
    pv_options: Mapping[str, OptionValue] | None = None
    #: The PV's StorageClass, for the message.
    storage_class: str | None = None
    #: Other mount points with the same superblock.
    shared_with: Sequence[str] = field(default_factory=tuple)


#: Options in which a difference gives a later mount a superblock of its own (kernel lab; lock, local_lock and acl
#: measured on NFSv3, which NFSv4 ignores anyway).
SEPARATE_SUPERBLOCK: tuple[str, ...] = ("vers", "ro", "sync", *ATTRIBUTE_CACHE_TIMES, "lookupcache", "cto", "hard",
                                        "softreval", "rsize", "wsize", "rdirplus", "sharecache", "write", "posix",
                                        "trunkdiscovery", "port", "lock", "local_lock", "acl")


def probable_origin(names: Iterable[str], hints: OriginHints) -> str:
    """Where options nobody declared most probably came from, in one sentence or two."""
    names = list(names)
    inherited = [name for name in names if name in INHERITED_THROUGH_SUPERBLOCK]
    if inherited:
        superblock = (" or another mount sharing the superblock, which keeps the options of the mount that made it "
                      "(kernel lab)")
    elif not all(name in SEPARATE_SUPERBLOCK for name in names):
        superblock = ", or a mount sharing the superblock"
    else:
        superblock = (f"; not a shared superblock: the kernel gives a mount that differs in {', '.join(names)} a "
                      "superblock of its own (kernel lab)")
        if hints.shared_with:
            superblock += f", so {', '.join(hints.shared_with)}, sharing this one, asked for it too"
    if hints.pv_options is None:
        return ("Probably from the PersistentVolume's spec.mountOptions (an old PV, provisioned from an older "
                f"StorageClass version, or one edited by hand) or a CSI driver's default{superblock}.")
    in_pv = [name for name in names if name in hints.pv_options or
             (name == "hard" and any(member in hints.pv_options for member in ("soft", "softerr")))]
    of_class = f" (StorageClass {hints.storage_class})" if hints.storage_class else ""
    if in_pv:
        return (f"The PersistentVolume's spec.mountOptions{of_class} carry it: an old PV, provisioned from an older "
                "StorageClass version, or one edited by hand; roll the profile's options out to it "
                "(spec.rollout.strategy: PatchBoundVolumes).")
    return ("The PersistentVolume's spec.mountOptions do not ask for it: the CSI driver or its mount helper adds it "
            f"(a CSI default){superblock}. Change the driver's defaults, or forbid the option in the profile "
            "(spec.forbiddenOptions) to make the conflict explicit.")


def _behaviour_effect(name: str, expected: OptionValue | None, actual: OptionValue | None,
                      observed: Mapping[str, OptionValue]) -> str:
    """What the undeclared value does (mountwarden.core.options.effects), said against what the contract implies."""
    if name in ATTRIBUTE_CACHE_TIMES and isinstance(actual, int) and isinstance(expected, int) and actual < expected:
        return (f"{name}={actual} revalidates attributes sooner than the contract implies: more GETATTR round "
                f"trips, each {EFS_METERING} (kernel lab: 5 RPCs per stat() two directories "
                "down with actimeo=0 and lookupcache=none).")
    if name == "lock" and actual is False and observed.get("ro"):
        return "Locks stay local to this client; on a read-only volume nobody writes, so no SQLite hazard."
    found = effect(name, actual)
    if found is not None:
        return found.text
    spec = BY_NAME.get(name)
    return spec.consequence if spec and spec.consequence else ""


def _ac_times_as_one(differences: list[tuple[str, OptionValue, OptionValue]]) -> tuple[str, str, str, str] | None:
    """The attribute-cache times that moved together, as a user would write them: (option, expected, actual, effect)."""
    times = [d for d in differences if d[0] in ATTRIBUTE_CACHE_TIMES]
    if len(times) < 2:
        return None
    values = {actual for _, _, actual in times}
    synchronous = any(name == "sync" and actual for name, _, actual in differences)
    expected = ",".join(format_canonical(name, value) for name, value, _ in times)
    if len(times) == 4 and values == {0} and synchronous:
        return ("noac", expected + ",async", "noac (actimeo=0 plus sync)",
                attribute_cache_effect(0, synchronous=True).text)
    if len(times) == 4 and len(values) == 1:
        value = times[0][2]
        option = f"actimeo={value}"
    else:
        option = ",".join(format_canonical(name, actual) for name, _, actual in times)
        value = max(actual for _, _, actual in times if isinstance(actual, int))
    directories_only = all(name.startswith("acdir") for name, _, _ in times)
    return option, expected, option, attribute_cache_effect(value, directories_only=directories_only).text


def compare_undeclared(declared: Mapping[str, OptionValue], observed: Mapping[str, OptionValue],
                       hints: OriginHints | None = None) -> list[Finding]:
    """One finding per behaviour option the contract does not name whose effective value is not the kernel default.

    ``declared`` options are compared by :func:`compare`; here only those it leaves out. The four
    attribute-cache times that moved together are one finding (actimeo=N, or noac with sync).
    """
    hints = hints or OriginHints()
    differences: list[tuple[str, OptionValue, OptionValue]] = []
    for name in BEHAVIOUR_OPTIONS:
        members = exclusive_group(name)
        named = any(member in declared for member in members) if members else name in declared
        if named or (name in ATTRIBUTE_CACHE_TIMES and "actimeo" in declared):
            continue
        if members is not None:
            expected = next((m for m in members if declared.get(m)), members[0])
            actual = next((m for m in members if observed.get(m)), members[0])
        else:
            expected, actual = effective_value(declared, name), effective_value(observed, name)
            if actual is not None and implied_value(observed, name) == actual:
                continue  # the consequence of another option in effect (nolock on NFSv3), judged as that one
        if actual is not None and actual != expected:
            differences.append((name, expected, actual))
    findings: list[Finding] = []
    grouped = _ac_times_as_one(differences)
    if grouped is not None:
        option, expected_text, shown, effect = grouped
        names = [name for name, _, _ in differences if name in ATTRIBUTE_CACHE_TIMES]
        if option == "noac":
            names.append("sync")
        differences = [d for d in differences if d[0] not in names]
        findings.append(_undeclared(option, expected_text, shown, expected_text, effect, names, Severity.ERROR, hints))
    for name, expected, actual in differences:
        members = exclusive_group(name)
        severity = _severity(name)
        if name == "lock" and observed.get("ro"):
            severity = Severity.INFO  # nolock on a volume nobody writes endangers no database
        shown = str(actual) if members is not None else _shown(name, actual)
        implied = str(expected) if members is not None else _shown(name, expected)
        findings.append(_undeclared(shown if members is not None else name, expected, actual, implied,
                                    _behaviour_effect(name, expected, actual, observed), [name], severity, hints,
                                    shown=shown))
    return findings


def _undeclared(option: str, expected: OptionValue, actual: OptionValue, implied: str, effect: str,
                names: list[str], severity: Severity, hints: OriginHints, *, shown: str | None = None) -> Finding:
    message = (f"{shown or actual} is in effect but the contract does not declare it (its preset and the kernel "
               f"default imply {implied}). {effect} {probable_origin(names, hints)}")
    return Finding(Reason.UNDECLARED_OPTION, severity, " ".join(message.split()),
                   "" if severity is Severity.INFO else UNDECLARED_REMEDY, option=option, expected=expected,
                   actual=actual)


def check(
    declared: Mapping[str, OptionValue],
    observed: Mapping[str, OptionValue],
    *,
    required: Iterable[str] = (),
    forbidden: Iterable[str] = (),
    origin: OriginHints | None = None,
) -> CheckResult:
    """The whole comparison: declared options, behaviour options nobody declared, required and forbidden options."""
    findings = (compare(declared, observed) + compare_undeclared(declared, observed, origin)
                + check_required(required, observed) + check_forbidden(forbidden, observed))
    return CheckResult(tuple(findings))
