"""What each option means and what it costs, in one line each (``mountwarden options explain``)."""

from collections.abc import Iterable
from dataclasses import dataclass

from mountwarden.core.options.normalize import kernel_io_size, suggest
from mountwarden.core.options.presets import EFS_METERING
from mountwarden.core.options.syntax import parse_option_tokens
from mountwarden.core.options.table import DEFAULT_PER_FLOW_CAP_GBPS, SPELLINGS, VERSION_FLAGS, Origin


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
        return (f"0 disables this cache: every stat() is a GETATTR round trip, {EFS_METERING}. "
                "It makes this client see others' changes sooner; it does not make others see this client's.")
    if name in ("actimeo", "acregmax") and value and value.isascii() and value.isdigit() and int(value) >= 60:
        return f"Another client's change to a file can stay invisible here for up to {value} s."
    if name == "lookupcache" and value == "none":
        return (f"Every path component of every stat() and open() is a LOOKUP round trip (kernel lab), each "
                f"{EFS_METERING}.")
    if name == "nconnect" and value and value.isascii() and value.isdigit():
        return _nconnect_note(int(value))
    if name in ("rsize", "wsize") and value and value.isascii() and value.isdigit():
        return _io_size_note(name, int(value))
    return ""


def _nconnect_note(connections: int) -> str:
    """The per-flow reasoning, whatever the value: what N connections can carry, and who decides."""
    cap = DEFAULT_PER_FLOW_CAP_GBPS
    carries = ("One connection carries at most" if connections == 1 else
               f"{connections} connections can carry up to {connections * cap:g} Gbit/s where one carries at most")
    return (f"{carries} {cap:g} Gbit/s between EC2 instances outside a cluster placement group (EC2 User "
            "Guide, 'Amazon EC2 instance network bandwidth'): size nconnect as ceil(min(instance bandwidth, "
            f"file-system limit) / {cap:g} Gbit/s) + 1, the arithmetic of the single-flow incident (three covered "
            "it): more cannot go faster than the instance or the file system allows. Only the first mount to a server sets "
            "it: later mounts of that server share its connections (kernel lab). Linux 5.3 or later (nfs(5)).")


def _io_size_note(name: str, size: int) -> str:
    used = kernel_io_size(size)
    kib = f" ({size // 1024} KiB)" if size % 1024 == 0 else ""
    if used == size:
        return (f"The kernel keeps {name}={size}{kib}: a whole number of pages within 1 MiB (kernel lab, over "
                "TCP); the server may negotiate it down to its own maximum (EFS offers 1 MiB).")
    return (f"The kernel uses {name}={used}, not {size}{kib} (kernel lab, over TCP); the server may lower it further "
            "to its own maximum.")


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
