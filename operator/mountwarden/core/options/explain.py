"""What each option means and what it costs, in one line each (``mountwarden options explain``)."""

from collections.abc import Iterable
from dataclasses import dataclass

from mountwarden.core.options.effects import effect
from mountwarden.core.options.normalize import suggest
from mountwarden.core.options.syntax import parse_option_tokens
from mountwarden.core.options.table import SPELLINGS, VERSION_FLAGS, OptionValue, Origin


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
    """Consequences that depend on the value, not only on the option (mountwarden.core.options.effects)."""
    typed: OptionValue = True if value is None else int(value) if value.isascii() and value.isdigit() else value
    found = effect(name, typed)
    return found.text if found else ""


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
