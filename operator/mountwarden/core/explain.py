"""What each option means and what it costs, in one line each (``mountwarden options explain``)."""

from collections.abc import Iterable
from dataclasses import dataclass

from mountwarden.core.options import suggest
from mountwarden.core.optionsyntax import parse_option_tokens
from mountwarden.core.optiontable import SPELLINGS, VERSION_FLAGS, Origin


@dataclass(frozen=True, slots=True)
class Explanation:
    token: str
    option: str
    meaning: str
    consequence: str
    origin: str
    known: bool = True

    def to_dict(self) -> dict:
        return {
            "token": self.token, "option": self.option, "meaning": self.meaning,
            "consequence": self.consequence, "origin": self.origin, "known": self.known,
        }


def _value_note(name: str, value: str | None) -> str:
    """Consequences that depend on the value, not only on the option."""
    if name in ("actimeo", "acregmin", "acregmax", "acdirmin", "acdirmax") and value == "0":
        return ("0 disables this cache: every stat() is a GETATTR round trip (~1 ms on EFS, metered as 4 KiB). "
                "It makes this client see others' changes sooner; it does not make others see this client's.")
    if name in ("actimeo", "acregmax") and value and value.isascii() and value.isdigit() and int(value) >= 60:
        return f"Another client's change to a file can stay invisible here for up to {value} s."
    if name == "lookupcache" and value == "none":
        return "Every path component of every open is a LOOKUP round trip; on EFS each is metered as 4 KiB."
    if name == "nconnect" and value and value != "1":
        return "Only the first mount to a server sets it: later mounts of that server share its connections."
    return ""


def explain(options: str | Iterable[str]) -> list[Explanation]:
    explanations = []
    for name, value in parse_option_tokens(options):
        token = name if value is None else f"{name}={value}"
        spec = SPELLINGS.get(name)
        if spec is None:
            explanations.append(Explanation(token, name, f"Unknown option.{suggest(name)}", "", "unknown", known=False))
            continue
        meaning = spec.meaning
        if name in VERSION_FLAGS:
            meaning = f"Same as vers={VERSION_FLAGS[name]}. {spec.meaning}"
        elif name == spec.negation:
            meaning = f"The negation of {spec.name}. {spec.meaning}"
        # A value-specific note says more than the option's general consequence.
        consequence = _value_note(spec.name, value) or spec.consequence
        if spec.deprecated:
            consequence = f"Deprecated: {spec.deprecated}. {consequence}".strip()
        if spec.origin in (Origin.EFS_UTILS, Origin.MOUNT_HELPER):
            consequence = f"{consequence} Never shown in the mount table: handled by {spec.origin}.".strip()
        explanations.append(Explanation(token, spec.name, meaning, consequence, str(spec.origin)))
    return explanations
