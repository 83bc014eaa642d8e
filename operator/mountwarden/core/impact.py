"""Which finding matters most: ranked by what it does to the volume's users, not by its severity word or its order.

Every finding's severity says whether it counts (core/findings.py); it does not say which of a volume's findings a
person should read first. Its impact does, in this order (each step with its source):

1. Data at risk now: SQLite on a network mount (sqlite.org, 'Use over a network'; a critical finding is SQLite in
   WAL mode across hosts), and soft on a read-write mount, which loses writes silently (nfs(5)).
2. A mount that fails or hangs now (core/node/failures.py: stale handles, dead servers, stuck helpers).
3. The wait an option's value adds to each operation it slows, beyond what the contract implies, in milliseconds
   at EFS's best latency (``WAIT_MS``): the import's ``sync`` (every write() waits for the server) before
   ``lookupcache=none`` or directories' attributes never cached (every path component of every stat() and open()
   a round trip: the same count per stat() in the kernel lab), before files' attributes never cached.
4. How long another client's change can stay unseen, beyond what the contract implies (seconds; nfs(5), kernel
   lab). After the waits: a wait is paid on every operation, staleness only when another client changed something.
5. Then, among findings alike in all of that: the worse severity; a finding that explains others (a shared
   superblock, an nconnect the server's first mount fixed), whose remedy is the one that works; an option the
   contract declares before one it does not name.

What an option's value does comes from core/options/effects.py, the one place that says it.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from mountwarden.core.findings import FAILURE_REASONS, Finding, OptionValue, Reason, Severity
from mountwarden.core.options.effects import Cost, effect
from mountwarden.core.options.normalize import normalize
from mountwarden.core.options.table import ATTRIBUTE_CACHE_TIMES, BY_NAME, exclusive_group


class Harm(IntEnum):
    """What a finding does to the volume's users, worse higher (the steps of the module's docstring)."""

    OTHER = 0
    STALE_READS = 1
    ADDED_WAIT = 2
    MOUNT_BROKEN = 3
    DATA_AT_RISK = 4


#: Milliseconds one kind of round trip adds to an operation it slows, at EFS's best latency.
#: - WRITES: every write() waits for the server (nfs(5), sync); a write round trip on EFS is as low as 2.7 ms
#:   (EFS User Guide, 'Amazon EFS performance specifications'; core/credits/bucket.py WRITE_ROUND_TRIP_SECONDS).
#: - PATH_LOOKUPS: 2 round trips per stat() of a file one directory below the mount (kernel lab, strict's stat
#:   loop: 100 LOOKUPs in 50 stat() calls with lookupcache=none, 97 more GETATTRs than staging's with acdir*=0;
#:   kernel_facts.json), at about 1 ms a metadata round trip (READ_ROUND_TRIP_SECONDS, the same guide).
#: - ATTRIBUTES: 1 GETATTR per stat() (kernel lab, staging's stat loop: 50 GETATTRs in 50 stat() calls), ~1 ms.
#: tests/unit/test_impact.py checks the round-trip counts against kernel_facts.json.
WAIT_MS: Mapping[Cost, float] = {Cost.WRITES: 2.7, Cost.PATH_LOOKUPS: 2.0, Cost.ATTRIBUTES: 1.0}

#: Findings whose remedy also ends the option findings they explain.
_EXPLAINS = frozenset({Reason.SUPERBLOCK_SHARED, Reason.NCONNECT_IGNORED})


@dataclass(frozen=True, order=True, slots=True)
class Impact:
    """A finding's impact; compares greater when it is worse."""

    harm: Harm
    #: Milliseconds added to each operation the finding's options slow (WAIT_MS).
    added_wait_ms: float
    #: Seconds another client's change can stay unseen through the finding's options.
    stale_seconds: int
    severity: int
    explains_others: bool
    declared: bool


#: Less than any finding's: what a verdict without findings (an unknown one) ranks by.
NO_IMPACT = Impact(Harm.OTHER, 0.0, 0, -1, False, False)


def options_of(finding: Finding) -> dict[str, OptionValue]:
    """The options in effect a finding is about, canonical (``{"sync": True}``; noac's five; none for a SQLite)."""
    option = finding.option or ""
    if finding.actual is None and ("=" in option or "," in option):
        return _said(option, option)  # the options themselves (the baseline's import flags: sync,actimeo=0)
    return _said(option, finding.actual)


def _implied(finding: Finding) -> dict[str, OptionValue]:
    """What the contract implies for the same options (empty when it names none: a forbidden option)."""
    return _said(finding.option, finding.expected) if finding.expected is not None else {}


def _said(option: str | None, value: OptionValue | None) -> dict[str, OptionValue]:
    if not option or value is None:
        return {}
    if isinstance(value, str) and exclusive_group(value) is not None:
        return {value: True}  # a flag of an exclusive group: soft where hard was declared
    written_out = isinstance(value, str) and ("=" in value or "," in value)
    if option in BY_NAME and not written_out:
        return {option: value}
    # Options written out: a group of attribute-cache times, noac, the import's flags, a forbidden token held.
    text = value if option in BY_NAME or (written_out and "(" not in str(value)) else option
    return dict(normalize(str(text).split(","), observed=True).options)


def _costs(options: Mapping[str, OptionValue]) -> Cost:
    cost = Cost.NONE
    for name, value in options.items():
        found = effect(name, value)
        if found is not None:
            cost |= found.cost
    return cost


def _stale_seconds(options: Mapping[str, OptionValue]) -> int:
    """The longest attribute-cache time among the options (another client's change unseen that long: nfs(5))."""
    return max((int(value) for name, value in options.items()
                if name in ATTRIBUTE_CACHE_TIMES and isinstance(value, int) and not isinstance(value, bool)),
               default=0)


def impact_of(finding: Finding) -> Impact:
    options, implied = options_of(finding), _implied(finding)
    # What the options in effect do beyond what the contract implies: a mount fresher than declared is no harm.
    cost = _costs(options) & ~_costs(implied)
    wait = round(sum(ms for kind, ms in WAIT_MS.items() if kind in cost), 3)
    stale = _stale_seconds(options) if _stale_seconds(options) > _stale_seconds(implied) else 0
    soft_writable = finding.reason is Reason.SOFT_WRITABLE_MOUNT or (
        any(options.get(flag) is True for flag in ("soft", "softerr")) and not options.get("ro"))
    if finding.reason in (Reason.SQLITE_ON_NFS, Reason.SQLITE_CLAIM_ON_NFS) or \
            finding.severity is Severity.CRITICAL or soft_writable:
        harm = Harm.DATA_AT_RISK
    elif finding.reason in FAILURE_REASONS:
        harm = Harm.MOUNT_BROKEN
    elif wait:
        harm = Harm.ADDED_WAIT
    elif stale:
        harm = Harm.STALE_READS
    else:
        harm = Harm.OTHER
    return Impact(harm, wait, stale, finding.severity.rank, finding.reason in _EXPLAINS,
                  finding.reason is Reason.OPTION_MISMATCH)


def by_impact(findings: Iterable[Finding]) -> list[Finding]:
    """The findings, the one with the most impact first (a stable sort: alike findings keep their order)."""
    return sorted(findings, key=impact_of, reverse=True)
