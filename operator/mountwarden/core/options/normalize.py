"""Mount options: validate against the NFS client's table and normalize to one canonical form.

Declared options (a profile, a StorageClass, a PV) and observed options (the
mount table, mountstats) are normalized the same way, so that comparing them is
comparing dictionaries. Normalizing follows the kernel: options apply left to
right, ``actimeo`` sets the four attribute-cache times, ``noac`` is those four at
0 plus ``sync``, ``v4.1``/``nfsvers=4.1``/``vers=4,minorversion=1`` are all
``vers=4.1``.
"""

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from mountwarden.core.findings import Severity
from mountwarden.core.options.syntax import format_option, parse_option_tokens
from mountwarden.core.options.table import (
    ATTRIBUTE_CACHE_TIMES,
    BY_NAME,
    CANONICAL_ORDER,
    LOOKUPCACHE_SPELLINGS,
    SECURITY_FLAVOURS,
    SPELLINGS,
    TRANSPORT_FLAGS,
    VERSION_FLAGS,
    Kind,
    OptionSpec,
    OptionValue,
    default_for,
    exclusive_group,
)

MAX_IO_SIZE = 1024 * 1024  # NFS_MAX_FILE_IO_SIZE
MIN_IO_SIZE = 1024  # NFS_MIN_FILE_IO_SIZE
DEFAULT_IO_SIZE = 4096  # NFS_DEF_FILE_IO_SIZE: what a size below the minimum becomes
PAGE_SIZE = 4096  # x86_64 and arm64 with 4 KiB pages
ACCESS_POINT_ID = re.compile(r"^fsap-[0-9a-f]{8,40}$")


@dataclass(frozen=True, slots=True)
class OptionProblem:
    """Something wrong with one option, said with its fix."""

    option: str
    message: str
    severity: Severity = Severity.ERROR

    def to_dict(self) -> dict[str, str]:
        return {"option": self.option, "message": self.message, "severity": str(self.severity)}


@dataclass(frozen=True, slots=True)
class NormalizedOptions:
    """Options in canonical form, in canonical order, with what was wrong on the way."""

    options: dict[str, OptionValue]
    errors: tuple[OptionProblem, ...] = ()
    warnings: tuple[OptionProblem, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def mount_options(self) -> list[str]:
        """The canonical options as mount syntax, one token each (a ``mountOptions`` list)."""
        return [format_canonical(name, value) for name, value in self.options.items()]

    @property
    def canonical(self) -> str:
        return ",".join(self.mount_options)

    def to_dict(self) -> dict:
        return {
            "canonical": self.canonical,
            "options": dict(self.options),
            "errors": [problem.to_dict() for problem in self.errors],
            "warnings": [problem.to_dict() for problem in self.warnings],
        }


def format_canonical(name: str, value: OptionValue) -> str:
    """One canonical option in mount syntax: switches by their spelling, values as name=value."""
    spec = BY_NAME.get(name)
    if spec is not None and spec.kind is Kind.SWITCH and isinstance(value, bool):
        return spec.name if value else str(spec.negation)
    return format_option(name, value)


def canonical_sort(options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """Order options as the table does; options it does not know go last, by name."""
    known_count = len(CANONICAL_ORDER)
    return dict(sorted(options.items(), key=lambda item: (CANONICAL_ORDER.get(item[0], known_count), item[0])))


def suggest(name: str) -> str:
    """A did-you-mean for an unknown option name, or an empty string."""
    matches = difflib.get_close_matches(name.lower(), list(SPELLINGS), n=1, cutoff=0.6)
    return f" Did you mean '{matches[0]}'?" if matches else ""


@dataclass
class _Normalizer:
    """One left-to-right pass over the tokens, as the kernel's parser makes it."""

    observed: bool
    options: dict[str, OptionValue] = field(default_factory=dict)
    errors: list[OptionProblem] = field(default_factory=list)
    warnings: list[OptionProblem] = field(default_factory=list)
    #: The token that last set each canonical option, for messages about contradictions.
    set_by: dict[str, str] = field(default_factory=dict)
    noac_token: str | None = None
    ac_token: str | None = None
    minorversion: int | None = None
    async_given: bool = False

    def error(self, option: str, message: str) -> None:
        # Observed options were printed by the kernel: never reject them, just note oddities.
        (self.warnings if self.observed else self.errors).append(OptionProblem(option, message))

    def warn(self, option: str, message: str) -> None:
        self.warnings.append(OptionProblem(option, message, Severity.WARNING))

    def assign(self, name: str, value: OptionValue, token: str, *, contradiction: bool) -> None:
        """Set a canonical option; a different earlier value is a contradiction or is overridden."""
        previous_token = self.set_by.get(name)
        if name in self.options and self.options[name] != value and previous_token != token:
            if contradiction:
                self.error(token, f"'{previous_token}' and '{token}' contradict each other: keep one of them.")
            else:
                self.warn(token, f"'{previous_token}' is overridden by the later '{token}': the kernel uses the last value.")
        self.options[name] = value
        self.set_by[name] = token

    def choose_exclusive(self, name: str, members: tuple[str, ...], token: str) -> None:
        for other in members:
            if other != name and other in self.options:
                self.error(token, f"'{self.set_by[other]}' and '{token}' contradict each other: keep one of them.")
                del self.options[other]
        self.options[name] = True
        self.set_by[name] = token

    def feed(self, name: str, value: str | None) -> None:
        token = name if value is None else f"{name}={value}"
        if not name:
            self.error(token, f"'{token}' has no option name before '=': remove it, or write name=value.")
            return
        if value is not None and value.count('"') % 2:
            # It would swallow every option after it: the kernel parses mount data the same way.
            self.error(name, f"'{token}' has an unbalanced double quote: close it, or remove it.")
            return
        spec = SPELLINGS.get(name)
        if spec is None:
            if self.observed:
                self.options[name] = True if value is None else value
            else:
                self.errors.append(OptionProblem(name, f"unknown option '{name}'.{suggest(name)} "
                                                 "See 'mountwarden options explain' for the options the NFS client accepts."))
            return
        if spec.deprecated:
            self.warn(name, f"'{name}' is {spec.deprecated}: remove it.")
        if name in VERSION_FLAGS:
            self.flag_without_value(name, value)
            self.assign("vers", VERSION_FLAGS[name], token, contradiction=True)
        elif spec.kind is Kind.FLAG:
            self.flag(spec, name, value, token)
        elif spec.kind is Kind.SWITCH:
            self.switch(spec, name, value, token)
        elif value is None or value == "":
            self.error(name, f"'{name}' needs a value, for example {_example(spec)}.")
        else:
            self.valued(spec, value, token)

    def flag_without_value(self, name: str, value: str | None) -> None:
        if value is not None:
            self.error(name, f"'{name}' takes no value: write '{name}' alone.")

    def flag(self, spec: OptionSpec, name: str, value: str | None, token: str) -> None:
        self.flag_without_value(name, value)
        if name in TRANSPORT_FLAGS:
            self.assign("proto", TRANSPORT_FLAGS[name], token, contradiction=True)
        elif (members := exclusive_group(name)) is not None:
            self.choose_exclusive(name, members, token)
        else:
            self.options[name] = True
            self.set_by[name] = token

    def switch(self, spec: OptionSpec, name: str, value: str | None, token: str) -> None:
        if spec.name == "fsc" and value is not None:  # fsc=<id> names a cache tag
            self.assign("fsc", value, token, contradiction=True)
            return
        self.flag_without_value(name, value)
        enabled = name == spec.name
        if spec.name == "ac":
            if enabled:
                self.ac_token = token
            else:
                self.noac_token = token
            return
        if spec.name == "sync" and not enabled:
            self.async_given = True
        self.assign(spec.name, enabled, token, contradiction=True)

    def valued(self, spec: OptionSpec, value: str, token: str) -> None:
        if spec.kind is Kind.NUMBER:
            number = self.number(spec, value)
            if number is None:
                return
            if spec.name == "actimeo":
                for time in ATTRIBUTE_CACHE_TIMES:
                    self.assign(time, number, token, contradiction=False)
            elif spec.name == "minorversion":
                self.minorversion = number
            else:
                if spec.name in ("rsize", "wsize"):
                    self.check_io_size(spec.name, number)
                self.assign(spec.name, number, token, contradiction=spec.name not in ATTRIBUTE_CACHE_TIMES)
        elif spec.kind is Kind.CHOICE:
            choice = LOOKUPCACHE_SPELLINGS.get(value, value) if spec.name == "lookupcache" else value
            if choice not in spec.choices:
                allowed = "|".join(("all", "none", "pos", "positive") if spec.name == "lookupcache" else spec.choices)
                self.error(spec.name, f"'{token}' is not valid: {spec.name} must be {allowed}.")
                return
            self.assign(spec.name, choice, token, contradiction=spec.name in ("vers", "proto"))
        else:
            self.text(spec, value, token)

    def number(self, spec: OptionSpec, value: str) -> int | None:
        if not (value.isascii() and value.isdigit()):
            self.error(spec.name, f"'{spec.name}={value}' is not a number: {spec.name} takes a whole number, "
                                  f"for example {_example(spec)}.")
            return None
        number = int(value)
        low, high = spec.minimum, spec.maximum
        if (low is not None and number < low) or (high is not None and number > high):
            self.error(spec.name, f"'{spec.name}={value}' is out of range: {spec.name} must be between {low} and {high}.")
            return None
        return number

    def check_io_size(self, name: str, size: int) -> None:
        used = kernel_io_size(size)
        if used == size:
            return
        if size > MAX_IO_SIZE:
            why = "is above the client's maximum"
        elif size < MIN_IO_SIZE:
            why = f"is below the client's minimum ({MIN_IO_SIZE}), so its default applies"
        elif size < PAGE_SIZE:
            why = "is below a page and not a power of two"
        else:
            why = f"is not a multiple of the page size ({PAGE_SIZE})"
        self.warn(name, f"{name}={size} {why}: the kernel uses {name}={used} (over TCP; the server may "
                        "lower it further to its own maximum).")

    def text(self, spec: OptionSpec, value: str, token: str) -> None:
        if spec.name == "sec":
            unknown = [flavour for flavour in value.split(":") if flavour not in SECURITY_FLAVOURS]
            if unknown:
                self.error("sec", f"'sec={value}' names unknown flavours {', '.join(unknown)}: "
                                  "use sys, krb5, krb5i, krb5p or none (colon-separated).")
                return
        if spec.name == "accesspoint" and not ACCESS_POINT_ID.match(value):
            self.error("accesspoint", f"'accesspoint={value}' is not an access point ID: it looks like fsap-0123456789abcdef0.")
            return
        self.assign(spec.name, value, token, contradiction=False)

    def finish(self) -> NormalizedOptions:
        self.apply_noac()
        self.apply_minorversion()
        if not self.observed:
            self.check_combinations()
        return NormalizedOptions(canonical_sort(self.options), tuple(self.errors), tuple(self.warnings))

    def apply_noac(self) -> None:
        if self.noac_token is None:
            return
        if self.ac_token is not None:
            self.error("noac", "'ac' and 'noac' contradict each other: keep one of them.")
        cached = [time for time in ATTRIBUTE_CACHE_TIMES if int(self.options.get(time, 0)) > 0]
        if cached:
            given = ", ".join(f"'{token}'" for token in dict.fromkeys(self.set_by[time] for time in cached))
            self.error("noac", f"'noac' contradicts {given}: noac sets every attribute cache time to 0. "
                               "Keep noac alone, or drop it and write actimeo=0 (which keeps writes asynchronous).")
        if self.async_given and not self.observed:
            self.warn("noac", "'noac' implies 'sync': 'async' is ignored.")
        for time in ATTRIBUTE_CACHE_TIMES:
            self.options[time] = 0
            self.set_by[time] = "noac"
        self.options["sync"] = True
        self.set_by["sync"] = "noac"

    def apply_minorversion(self) -> None:
        if self.minorversion is None:
            return
        version = self.options.get("vers")
        minor = f"4.{self.minorversion}"
        if version in (None, "4"):
            self.options["vers"] = minor
        elif version != minor:
            self.error("minorversion", f"'minorversion={self.minorversion}' contradicts 'vers={version}': "
                                       f"write vers={minor} alone.")

    def check_combinations(self) -> None:
        options = self.options
        if str(options.get("proto", "")).startswith("udp") and str(options.get("vers", "")).startswith("4"):
            self.error("proto", "NFSv4 does not run over UDP: use proto=tcp.")
        if options.get("tls") and options.get("notls"):
            self.error("tls", "'tls' and 'notls' contradict each other: keep one of them.")
        for needs_tls in ("iam", "accesspoint"):
            if needs_tls in options and not options.get("tls"):
                self.error(needs_tls, f"'{needs_tls}' requires 'tls' (efs-utils refuses the mount without it): add tls.")
        if options.get("soft") or options.get("softerr"):
            self.warn("soft", "soft/softerr turn server timeouts into I/O errors that applications rarely handle: "
                              "prefer hard unless the workload tolerates failed writes.")
        if str(options.get("vers", "")).startswith("4") and (options.get("lock") is False
                                                             or options.get("local_lock") not in (None, "none")):
            self.warn("lock", "NFSv4 ignores nolock and local_lock: locks always reach the server (the kernel "
                              "shows local_lock=none). Remove them, or use vers=3 if locks must stay local.")
        if options.get("sloppy"):
            self.warn("sloppy", "'sloppy' makes mount.nfs drop options it does not know, so typos pass silently: remove it.")


def _example(spec: OptionSpec) -> str:
    if spec.choices:
        return f"{spec.name}={spec.choices[0]}"
    if spec.default is not None and not isinstance(spec.default, bool):
        return f"{spec.name}={spec.default}"
    return {"addr": "addr=10.0.0.5", "sec": "sec=sys", "accesspoint": "accesspoint=fsap-0123456789abcdef0"}.get(
        spec.name, f"{spec.name}=..." if spec.kind is Kind.TEXT else f"{spec.name}=1"
    )


def kernel_io_size(asked: int, server_max: int | None = None) -> int:
    """The rsize/wsize the Linux NFS client (6.1, TCP) uses for ``asked``, as the kernel lab measured it.

    Below 1024 it takes its default of 4096; above 1 MiB it takes 1 MiB; below a page it rounds
    down to a power of two (4095 -> 2048); otherwise down to a whole number of pages (516096, 504
    KiB, is kept). A server whose maximum is lower negotiates it down to that maximum, sized the
    same way. Measured in tests/kernel/test_io_sizes.py.
    """
    if asked < MIN_IO_SIZE:
        size = DEFAULT_IO_SIZE
    elif asked >= MAX_IO_SIZE:
        size = MAX_IO_SIZE
    elif asked < PAGE_SIZE:
        size = 1 << (asked.bit_length() - 1)
    else:
        size = asked - asked % PAGE_SIZE
    if server_max is not None and server_max < size:
        return kernel_io_size(server_max)
    return size


# What decides whether a later mount of a file system through the same NFS client gets the existing superblock,
# measured option by option in the kernel lab (docs/reference/kernel-behaviour.md, `make kernel-facts`; the
# unit tests hold these to kernel_facts.json, and every `make test` measures a subset again).

#: Options a later mount silently takes from a superblock it shares: the kernel does not compare them, and the
#: later mount runs with the first one's value (timeo, retrans, resvport, fsc and bsize are the superblock's;
#: nconnect and max_connect the client's; mountproto NFSv3's MOUNT transport).
INHERITED_THROUGH_SUPERBLOCK: tuple[str, ...] = ("timeo", "retrans", "resvport", "nconnect", "max_connect", "fsc",
                                                 "bsize", "mountproto")
#: The mount's own VFS flags: mounts sharing a superblock each keep theirs.
PER_MOUNT_OPTIONS: tuple[str, ...] = ("suid", "dev", "exec", "relatime", "noatime", "strictatime", "nodiratime")
#: Accepted and kept nowhere /proc shows, nor compared: they neither separate mounts nor show in effect.
IGNORED_OPTIONS: tuple[str, ...] = ("intr", "lazytime", "dirsync", "namlen", "context")
#: What NFSv4 ignores (locks always reach the server; no NFSACL side protocol); NFSv3 compares them.
IGNORED_ON_NFS4: tuple[str, ...] = ("lock", "local_lock", "acl")

#: What the kernel does not compare when it gives a later mount of the same file system, through the same client,
#: the existing superblock; a difference in any other option it was measured with gives a superblock of its own.
NOT_COMPARED_FOR_SUPERBLOCK = frozenset({
    *INHERITED_THROUGH_SUPERBLOCK, *PER_MOUNT_OPTIONS, *IGNORED_OPTIONS, *IGNORED_ON_NFS4,
})


def superblock_key(options: Mapping[str, OptionValue]) -> tuple[tuple[str, OptionValue], ...]:
    """The options that decide whether two mounts of one file system through one client share a superblock.

    Equal keys share (unless either says nosharecache); rsize and wsize are compared as the kernel holds them,
    after negotiation, so pass what the server settled where it differs from what was asked.
    """
    effective = with_kernel_defaults(options)
    compared_on_v3 = () if str(effective.get("vers", "4")).startswith("4") else IGNORED_ON_NFS4
    return tuple(sorted((name, value) for name, value in effective.items()
                        if name not in NOT_COMPARED_FOR_SUPERBLOCK or name in compared_on_v3))


def normalize(options: str | Iterable[str] | None, *, observed: bool = False) -> NormalizedOptions:
    """Validate and normalize options, keeping the kernel's left-to-right semantics.

    ``observed=True`` is for text the kernel printed (mount table, mountstats):
    unknown options are kept as they are and nothing is an error.
    """
    normalizer = _Normalizer(observed=observed)
    for name, value in parse_option_tokens(options):
        normalizer.feed(name, value)
    return normalizer.finish()


def layer(*layers: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """Stack canonical option sets; a later layer replaces keys and exclusive flags of earlier ones."""
    merged: dict[str, OptionValue] = {}
    for options in layers:
        for name, value in options.items():
            members = exclusive_group(name)
            if members is not None:
                for other in members:
                    merged.pop(other, None)
            merged[name] = value
    return canonical_sort(merged)


def implied_value(options: Mapping[str, OptionValue], name: str) -> OptionValue | None:
    """What the kernel sets ``name`` to because of another option of ``options``; None when nothing implies it.

    On NFSv2 and v3, nolock also keeps every lock local: the kernel shows it as nolock,local_lock=all (kernel
    lab, kernel_facts.json "locking": vers=3 with nolock has effective lock options nolock and local_lock=all).
    """
    if name == "local_lock" and options.get("lock") is False and str(options.get("vers", "")).startswith(("2", "3")):
        return "all"
    return None


def effective_value(options: Mapping[str, OptionValue], name: str) -> OptionValue | None:
    """The value in effect for ``name``: as given, else as another option implies it, else the kernel default."""
    members = exclusive_group(name)
    if members is not None:
        chosen = next((member for member in members if options.get(member)), members[0])
        return chosen == name
    if name in options:
        return options[name]
    implied = implied_value(options, name)
    return implied if implied is not None else default_for(name, str(options.get("proto", "tcp")))


def with_kernel_defaults(options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """Fill in what the kernel uses for every option it has a default for, or that another option implies
    (what mountstats shows)."""
    implied = {name: value for name in ("local_lock",) if name not in options
               and (value := implied_value(options, name)) is not None}
    return layer(_kernel_defaults(str(options.get("proto", "tcp"))), {**implied, **options})


@lru_cache(maxsize=16)
def _kernel_defaults(proto: str) -> dict[str, OptionValue]:
    return {
        spec.name: default
        for spec in BY_NAME.values()
        if spec.visible_in_mount_table and (default := default_for(spec.name, proto)) is not None
    }
