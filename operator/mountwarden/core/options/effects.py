"""What a mount option does, by value, and where each fact comes from: the one place that says it.

``mountwarden options explain``, the comparison of options nobody declared (compare), admission's
warning about what costs burst credits, and the presets' descriptions format these effects; none of
them words an option's cost or staleness on its own. Sources: nfs(5), the kernel lab's measurements
(docs/reference/kernel-behaviour.md), the incident (sync, actimeo=0 and lookupcache=none behind an
8-hour import), the EFS and EC2 user guides.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Flag, auto

from mountwarden.core.options.normalize import effective_value, kernel_io_size
from mountwarden.core.options.table import ATTRIBUTE_CACHE_TIMES, DEFAULT_PER_FLOW_CAP_GBPS, OptionValue

EFS_METERING = "metered as at least 4 KiB on EFS (EFS User Guide, 'Amazon EFS performance specifications')"


class Cost(Flag):
    """The round trips an option's value makes a mount pay."""

    NONE = 0
    PATH_LOOKUPS = auto()  # every stat() and open() revalidates each component of its path
    ATTRIBUTES = auto()  # every stat() asks the server for the file's attributes
    WRITES = auto()  # every write() waits for the server


#: Each cost as admission's warning says it ("... make <phrase>").
COST_PHRASES = {
    Cost.PATH_LOOKUPS: ("every stat() and open() a round trip per path component (5 for a file two directories "
                        "down: kernel lab)"),
    Cost.WRITES: "every write() wait for the server (nfs(5))",
}
#: The costs that spend burst credits on metadata or writes, not on data: what admission warns of on Bursting EFS.
#: One GETATTR per stat() (acregmax=0, as staging has) is the price of never being stale, and is not among them.
CREDIT_COSTS = Cost.PATH_LOOKUPS | Cost.WRITES


@dataclass(frozen=True, slots=True)
class Effect:
    """What one value of one option does to a mount, each fact with its source."""

    text: str
    cost: Cost = Cost.NONE


_SYNC = Effect(f"Every write() waits for the server: a round trip per write (nfs(5)), each {EFS_METERING}; sync is "
               "one of the three flags behind the 8-hour import (the incident), and it does not refresh another "
               "client's cache: other clients see the writes no sooner (kernel lab).", Cost.WRITES)
_NO_ATTRIBUTE_CACHE = Effect(f"Attributes are never cached: every stat() is a GETATTR round trip (kernel lab), each "
                             f"{EFS_METERING}. It makes this client see others' changes sooner; it does not make "
                             "others see this client's.", Cost.ATTRIBUTES | Cost.PATH_LOOKUPS)
_NO_FILE_ATTRIBUTE_CACHE = Effect(f"File attributes are never cached: every stat() is a GETATTR round trip (kernel "
                                  f"lab), each {EFS_METERING}.", Cost.ATTRIBUTES)
_NO_DIRECTORY_ATTRIBUTE_CACHE = Effect("Directory attributes are never cached: each path component of every stat() "
                                       f"and open() is revalidated, a round trip each, {EFS_METERING}; kernel lab.",
                                       Cost.PATH_LOOKUPS)
_NO_LOOKUP_CACHE = Effect("Every path component of every stat() and open() is a LOOKUP round trip (kernel lab: 5 RPCs "
                          f"per stat() two directories down with actimeo=0), each {EFS_METERING}.", Cost.PATH_LOOKUPS)
_NEGATIVE_LOOKUPS_CACHED = Effect("A name this client looked up and did not find stays missing after another client "
                                  "creates it, until the directory's attributes expire (kernel lab).")
_SOFT = Effect("soft turns a server that does not answer for retrans x timeo into I/O errors that applications rarely "
               "handle: writes can be lost silently (nfs(5)).")
_NOAC = Effect(f"Every stat() is a GETATTR round trip and every write() waits for the server (nfs(5)), each "
               f"{EFS_METERING}: noac is two of the three flags behind the 8-hour import (the incident).",
               Cost.ATTRIBUTES | Cost.PATH_LOOKUPS | Cost.WRITES)


def _stale(seconds: int, *, lookups: bool = False) -> Effect:
    also = ", and a name this client failed to find can stay missing as long" if lookups else ""
    return Effect(f"Another client's change can stay invisible to stat() for up to {seconds} s{also} (nfs(5); "
                  "kernel lab).")


def effect(name: str, value: OptionValue | None) -> Effect | None:
    """What ``name`` set to ``value`` does; None when nothing beyond the option's general consequence is known.

    ``name`` is the option as the table names it (``actimeo`` included, for the four times it sets);
    for an exclusive flag (hard, soft, softerr) the value is the flag in effect.
    """
    if name == "sync" and value is True:
        return _SYNC
    if name in (*ATTRIBUTE_CACHE_TIMES, "actimeo") and isinstance(value, int) and not isinstance(value, bool):
        if value == 0:
            return {"actimeo": _NO_ATTRIBUTE_CACHE, "acdirmin": _NO_DIRECTORY_ATTRIBUTE_CACHE,
                    "acdirmax": _NO_DIRECTORY_ATTRIBUTE_CACHE}.get(name, _NO_FILE_ATTRIBUTE_CACHE)
        return _stale(value, lookups=name == "actimeo")
    if name == "lookupcache":
        return {"none": _NO_LOOKUP_CACHE, "all": _NEGATIVE_LOOKUPS_CACHED}.get(str(value))
    if (name == "hard" and value in ("soft", "softerr")) or (name in ("soft", "softerr") and value is True):
        return _SOFT
    if name == "nconnect" and isinstance(value, int) and not isinstance(value, bool):
        return Effect(_nconnect_text(value))
    if name in ("rsize", "wsize") and isinstance(value, int) and not isinstance(value, bool):
        return Effect(_io_size_text(name, value))
    return None


def attribute_cache_effect(value: int, *, directories_only: bool = False, synchronous: bool = False) -> Effect:
    """The four attribute-cache times moved together to ``value`` (actimeo=N; noac when 0 with sync)."""
    if value == 0 and synchronous:
        return _NOAC
    if value == 0:
        return _NO_DIRECTORY_ATTRIBUTE_CACHE if directories_only else _NO_ATTRIBUTE_CACHE
    return _stale(value, lookups=True)


def credit_costs(options: Mapping[str, OptionValue]) -> list[tuple[str, Cost]]:
    """The options in effect that spend burst credits on metadata or writes, as a user writes them, with their cost.

    The four attribute-cache times at 0 read as actimeo=0; directory attributes alone at 0 as acdirmax=0; files'
    own attributes at 0 (staging) cost one GETATTR per stat() and are not listed (CREDIT_COSTS).
    """
    found: list[tuple[str, Cost]] = []
    if effective_value(options, "sync"):
        found.append(("sync", _SYNC.cost))
    if all(effective_value(options, name) == 0 for name in ATTRIBUTE_CACHE_TIMES):
        found.append(("actimeo=0", _NO_ATTRIBUTE_CACHE.cost))
    elif effective_value(options, "acdirmax") == 0:
        found.append(("acdirmax=0", _NO_DIRECTORY_ATTRIBUTE_CACHE.cost))
    lookups = effect("lookupcache", effective_value(options, "lookupcache"))
    if lookups is not None and lookups.cost:
        found.append(("lookupcache=none", lookups.cost))
    return [(option, cost) for option, cost in found if cost & CREDIT_COSTS]


def cost_phrase(cost: Cost) -> str:
    """``cost`` as admission says what options make: 'every stat() and open() ... and every write() ...'."""
    return " and ".join(phrase for part, phrase in COST_PHRASES.items() if part in cost & CREDIT_COSTS)


def nconnect_sizing(cap: float = DEFAULT_PER_FLOW_CAP_GBPS) -> str:
    """How to size nconnect, with the arithmetic and the advice of the write-up it comes from."""
    return (f"size nconnect as ceil(min(instance bandwidth, file-system limit) / {cap:g} Gbit/s): the FSx write-up put "
            f"10.2 Gbit/s of file-system throughput over {cap:g} Gbit/s flows as ceil(2.04) = 3, 'two close, three with "
            "a comfortable buffer'; one connection more as headroom for metadata and small requests is a choice, not "
            "a need; benchmark the value before rolling it out, as the write-up says")


def _nconnect_text(connections: int) -> str:
    """The per-flow reasoning, whatever the value: what N connections can carry, and who decides."""
    cap = DEFAULT_PER_FLOW_CAP_GBPS
    carries = ("One connection carries at most" if connections == 1 else
               f"{connections} connections can carry up to {connections * cap:g} Gbit/s where one carries at most")
    return (f"{carries} {cap:g} Gbit/s between EC2 instances outside a cluster placement group (EC2 User "
            f"Guide, 'Amazon EC2 instance network bandwidth'): {nconnect_sizing(cap)}; more cannot go faster than the "
            "instance or the file system allows. Only the first mount to a server sets it: later mounts of that server "
            "share its connections (kernel lab). The kernel's transports (one xprt: line each in mountstats) say "
            "whether it did: Linux 5.3 brought nconnect (nfs(5)), and some older enterprise kernels (RHEL 8's 4.18) "
            "carry it backported.")


def _io_size_text(name: str, size: int) -> str:
    used = kernel_io_size(size)
    kib = f" ({size // 1024} KiB)" if size % 1024 == 0 else ""
    if used == size:
        return (f"The kernel keeps {name}={size}{kib}: a whole number of pages within 1 MiB (kernel lab, over "
                "TCP); the server may negotiate it down to its own maximum (EFS offers 1 MiB).")
    return (f"The kernel uses {name}={used}, not {size}{kib} (kernel lab, over TCP); the server may lower it further "
            "to its own maximum.")


@dataclass(frozen=True, slots=True)
class Freshness:
    """How long another client's change can stay unseen through a mount, in seconds."""

    #: stat() of a path answers from the attribute cache for up to acregmax seconds (nfs(5); kernel lab: staging's
    #: acregmax=0 measured 0 s, coherent's acregmax=3 up to 3 s, cached's 600).
    stat_seconds: int
    #: A name this client looked up and missed stays missing after another client creates it while negative entries
    #: are cached (lookupcache=all): up to acdirmax seconds (kernel lab: cached kept a failed lookup the whole run).
    new_name_seconds: int


def freshness(options: Mapping[str, OptionValue]) -> Freshness:
    stat = effective_value(options, "acregmax")
    lookups = effective_value(options, "lookupcache")
    new_name = effective_value(options, "acdirmax") if lookups == "all" else 0
    return Freshness(int(stat or 0), int(new_name or 0))


def freshness_lost(before: Mapping[str, OptionValue], after: Mapping[str, OptionValue]) -> str | None:
    """What a change of options costs in freshness, as a sentence; None when nothing gets staler."""
    old, new = freshness(before), freshness(after)
    lost = []
    if new.stat_seconds > old.stat_seconds:
        lost.append(f"stat() by path up to {new.stat_seconds} s stale instead of "
                    + (f"{old.stat_seconds} s" if old.stat_seconds else "never"))
    if new.new_name_seconds > old.new_name_seconds:
        lost.append(f"a file another client creates missing for up to {new.new_name_seconds} s instead of "
                    + (f"{old.new_name_seconds} s" if old.new_name_seconds else "seen at once"))
    return "; ".join(lost) + " (nfs(5); kernel lab)" if lost else None
