"""Declared against observed: what a mount really does compared with its contract.

An option missing from the mount table counts as its kernel default, because
/proc/mounts prints most options only when they differ from the default (and
never prints actimeo). Options the kernel never sees (efs-utils' tls, iam, ...)
cannot be checked from the mount table and are left out.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mountwarden.core.options import Severity, effective_value, format_canonical, normalize
from mountwarden.core.optiontable import ATTRIBUTE_CACHE_TIMES, BY_NAME, Concern, OptionValue, exclusive_group

_SEVERITY_BY_CONCERN = {
    Concern.CONSISTENCY: Severity.ERROR,
    Concern.DURABILITY: Severity.ERROR,
    Concern.PERFORMANCE: Severity.WARNING,
    Concern.IDENTITY: Severity.INFO,
}


@dataclass(frozen=True, slots=True)
class Finding:
    option: str
    expected: OptionValue | None
    actual: OptionValue | None
    severity: Severity
    message: str

    def to_dict(self) -> dict:
        return {
            "option": self.option,
            "expected": self.expected,
            "actual": self.actual,
            "severity": str(self.severity),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class CheckResult:
    findings: tuple[Finding, ...]

    @property
    def compliant(self) -> bool:
        """Compliant means nothing worse than information: no error and no warning."""
        return all(finding.severity is Severity.INFO for finding in self.findings)

    def to_dict(self) -> dict:
        return {"compliant": self.compliant, "findings": [finding.to_dict() for finding in self.findings]}


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
            findings.append(Finding(name, expected, None, Severity.INFO,
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
    return Finding(name_for_value, expected_value, actual_value, _severity(name), message)


def _in_effect(option_name: str, value: OptionValue, observed: Mapping[str, OptionValue]) -> bool:
    return effective_value(observed, option_name) == (True if exclusive_group(option_name) else value)


def check_required(required: Iterable[str], observed: Mapping[str, OptionValue]) -> list[Finding]:
    """A required option (``hard``, ``vers=4.1``) that is not in effect is an error."""
    findings = []
    for token in required:
        for name, value in normalize(token).options.items():
            if _checkable(name) and not _in_effect(name, value, observed):
                actual = effective_value(observed, name)
                findings.append(Finding(name, value, actual, Severity.ERROR,
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
        Finding(token, None, held, Severity.ERROR, f"{token} is forbidden by the profile but the mount has {held}.")
        for token, held in forbidden_violations(forbidden, observed)
    ]


def check(
    declared: Mapping[str, OptionValue],
    observed: Mapping[str, OptionValue],
    *,
    required: Iterable[str] = (),
    forbidden: Iterable[str] = (),
) -> CheckResult:
    """The whole comparison: declared options, required options and forbidden options."""
    findings = compare(declared, observed) + check_required(required, observed) + check_forbidden(forbidden, observed)
    return CheckResult(tuple(findings))
