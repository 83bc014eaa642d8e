"""Named cache policies, each a promise in the terms a user's code depends on.

One policy shared by every consumer hurts one of them: ``sync,actimeo=0,lookupcache=none``
made an importer on EFS take 8 hours, and removing it broke an upload service that relied
on fresh attributes (the incident). A preset names the trade-off so each consumer picks its
own, and says what it promises: how stale a stat() by path can be, whether open()+fstat()
sees another client's closed writes (close-to-open), how long a name this client failed to
find stays "missing" after another client creates it, what a write() waits for, and what it
costs. The staleness and cost figures are measured by the kernel lab (``make kernel-facts``,
mountwarden.core.options.kernelfacts) and shown beside these texts by ``options presets``.

A preset may be renamed or redefined; the old name stays accepted (``DEPRECATED``) with a
warning at admission and in status, and means its replacement's options, which reach
existing profiles through a new StorageClass version like any other change of options.
"""

from dataclasses import dataclass
from enum import StrEnum

from mountwarden.core.options.effects import EFS_METERING

#: What to use instead of options that make metadata a round trip: the presets' measured promises (kernel lab).
CHEAPER_PRESETS = ("use cachePolicy staging for data several clients change (1 GETATTR per stat(), never stale: kernel "
                   "lab), cached where others' changes may show up to 10 minutes late")

EFS_PROVISIONER = "efs.csi.aws.com"

#: How EFS meters a request, with its source, for every message that says it.

#: What AWS recommends for every EFS mount, under any preset.
EFS_BASELINE: tuple[str, ...] = (
    "vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
)


class CachePolicy(StrEnum):
    STRICT = "strict"
    STAGING = "staging"
    CACHED = "cached"
    READ_ONLY = "read-only"
    #: Deprecated: the staging options (see DEPRECATED).
    COHERENT = "coherent"


@dataclass(frozen=True, slots=True)
class Promise:
    """What a preset promises, in the terms a user's code depends on; each claim names its source."""

    #: How stale a stat() (or ls -l) by path can be after another client changes the file.
    stat_by_path: str
    #: What open() followed by fstat() sees after another client's close() (close-to-open).
    open_after_close: str
    #: How long a name this client looked up and did not find stays missing after another client creates it.
    new_files: str
    #: What a write() waits for, and what survives a client crash or a server away.
    writes: str
    #: Round trips per call, and what they cost on EFS.
    cost: str


@dataclass(frozen=True, slots=True)
class Preset:
    name: CachePolicy
    options: tuple[str, ...]
    use_for: str
    #: Workloads the preset is no answer for, and what is.
    not_for: str
    promise: Promise


#: No preset sets sync: every one writes as the kernel does by default.
ASYNC_WRITES = (
    "write() returns once the data is in this client's page cache; close() and fsync() return once the server "
    "has it (async, the default: nfs(5)). Requests are retried until the server answers (hard: on EFS the AWS "
    "baseline sets it, elsewhere it is the kernel default)."
)
CLOSE_TO_OPEN = (
    "Fresh: open() asks the server, so open()+fstat() after another client's close() sees its writes "
    "(close-to-open; kernel lab: 0 s)."
)
NOT_FOR_SQLITE_OR_SMALL_FILES = (
    "SQLite databases and trees of many small files (build trees, package caches): keep them on local storage."
)
#: Why no preset is offered for SQLite or small-file trees (said once, under every preset list).
LOCAL_STORAGE_NOTE = (
    "No cache setting is an answer for SQLite or for trees of many small files. Every SQLite lock drops the "
    "file's cached attributes and data when the client holds no delegation (fs/nfs/file.c do_setlk; kernel lab: "
    "tests/kernel/test_presets_promises.py), and EFS grants none (EFS User Guide, 'Unsupported NFSv4.0 and 4.1 "
    "features'), so caching saves SQLite no round trip. On trees of many small files EFS took 15:29 where EBS took "
    "1:26 (the build-performance study). Keep both on storage local to the pod: an emptyDir with a sizeLimit and an "
    "ephemeral-storage request, or a generic ephemeral volume (SQLiteOnNFS in docs/runbook.md)."
)


PRESETS: dict[CachePolicy, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            CachePolicy.STRICT,
            ("actimeo=0", "lookupcache=none"),
            use_for="Directories several clients change and must see changed at once, metadata and listings "
                    "included, at few operations per second.",
            not_for=NOT_FOR_SQLITE_OR_SMALL_FILES + " Not for anything busy on a Bursting EFS file system: "
                    "staging gives the same freshness of stat() for about a fifth of the round trips (kernel lab).",
            promise=Promise(
                stat_by_path="Never stale: nothing is cached (actimeo=0), every stat() asks the server "
                             "(kernel lab: 0 s).",
                open_after_close=CLOSE_TO_OPEN,
                new_files="Seen at once: no lookup is cached (lookupcache=none; kernel lab).",
                writes=ASYNC_WRITES,
                cost="Every stat() and open() revalidates each component of the path: 5 round trips per stat() of "
                     f"a file two directories down (kernel lab), each {EFS_METERING}: a 20 GiB Bursting file "
                     "system with no credits left does only 256 of them a second.",
            ),
        ),
        Preset(
            CachePolicy.STAGING,
            ("acregmin=0", "acregmax=0", "lookupcache=positive", "cto"),
            use_for="Directories several clients write and read at once: uploads assembled from chunks, spools, "
                    "shared work queues (the upload incident's staging directory).",
            not_for=NOT_FOR_SQLITE_OR_SMALL_FILES,
            promise=Promise(
                stat_by_path="Never stale: a file's attributes are not cached (acregmin=acregmax=0), so stat() by "
                             "path asks the server each time (kernel lab: 0 s). Directory attributes are cached as "
                             "by default (30-60 s).",
                open_after_close=CLOSE_TO_OPEN,
                new_files="Seen at once: a failed lookup is not cached (lookupcache=positive; kernel lab), so a "
                          "file another client creates is found by the next stat() or open().",
                writes=ASYNC_WRITES,
                cost="One GETATTR round trip per stat() of a file, one more per open(), a LOOKUP for each look-up "
                     "of a name that does not exist (kernel lab: a fifth of strict's round trips per stat(), a "
                     f"seventh of them for ls -l), each {EFS_METERING}.",
            ),
        ),
        Preset(
            CachePolicy.CACHED,
            ("actimeo=600", "lookupcache=all"),
            use_for="Data one client writes and others read later, where other clients' changes may show up to "
                    "10 minutes late: large files written once (datasets, artifacts, exports), one writer's own "
                    "working directory.",
            not_for=NOT_FOR_SQLITE_OR_SMALL_FILES + " Not for directories several clients change: use staging.",
            promise=Promise(
                stat_by_path="Up to 10 minutes stale: another client's change to a file stays invisible to stat() "
                             "by path for up to 600 s (acregmax=600; kernel lab: stale for the whole run). This "
                             "client's own changes are seen at once.",
                open_after_close=CLOSE_TO_OPEN,
                new_files="Up to 10 minutes: a name this client looked up and did not find stays missing for up to "
                          "600 s after another client creates it (lookupcache=all keeps failed lookups until the "
                          "directory's attributes expire, acdirmax=600; kernel lab).",
                writes=ASYNC_WRITES,
                cost="Almost no metadata round trips (kernel lab: no GETATTR in 50 stat() calls): the file "
                     "system's budget goes to data.",
            ),
        ),
        Preset(
            CachePolicy.READ_ONLY,
            ("ro", "actimeo=600", "nocto", "lookupcache=all"),
            use_for="Static content nobody writes while it is mounted: models, assets, reference data.",
            not_for="Anything that changes while mounted: other clients' changes stay invisible for up to 10 "
                    "minutes. SQLite databases, unless opened read-only with immutable=1, which takes no locks "
                    "(sqlite.org, 'Uniform Resource Identifiers').",
            promise=Promise(
                stat_by_path="Up to 10 minutes stale (acregmax=600; kernel lab: stale for the whole run).",
                open_after_close="Fresh on NFSv4: nocto skips the revalidation on open, but without a delegation "
                                 "(EFS grants none) every open() is an OPEN round trip that brings fresh attributes "
                                 "back (kernel lab: 0 s). On NFSv3, nocto lets open() use attributes up to 10 "
                                 "minutes old (nfs(5)).",
                new_files="Up to 10 minutes, as cached (lookupcache=all, acdirmax=600; kernel lab).",
                writes="None: the mount is read-only (ro).",
                cost="Almost no metadata round trips, as cached: nocto saves nothing on NFSv4 without delegations, "
                     "where each open()+close() is an OPEN and a CLOSE anyway (kernel lab).",
            ),
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Deprecation:
    """A preset name kept for existing profiles: it means ``replaced_by``'s options."""

    name: CachePolicy
    replaced_by: CachePolicy
    #: Its options before, still measured by the kernel lab (kernel_facts.json's former_presets).
    former_options: tuple[str, ...]
    why: str

    def warning(self) -> str:
        return (f"cachePolicy {self.name} is deprecated: {self.why} It now means {self.replaced_by} "
                f"({','.join(PRESETS[self.replaced_by].options)}): write cachePolicy: {self.replaced_by}. A profile "
                f"that had {self.name} gets a new StorageClass version with these options; spec.rollout decides "
                "when its bound volumes are mounted with them.")


DEPRECATED: dict[CachePolicy, Deprecation] = {
    CachePolicy.COHERENT: Deprecation(
        CachePolicy.COHERENT, CachePolicy.STAGING, ("cto", "lookupcache=positive", "acregmax=3"),
        "its options (cto,lookupcache=positive,acregmax=3, so acregmin=acregmax=3) left stat() by path up to 3 s "
        "stale (measured in the kernel lab), the window in which the upload incident's second replica read a "
        "cached size and the chunked upload failed with 416.",
    ),
}


def preset_of(name: str) -> tuple[Preset, Deprecation | None] | None:
    """The preset a cachePolicy value stands for, and its deprecation; None for an unknown name."""
    if name not in CachePolicy._value2member_map_:
        return None
    policy = CachePolicy(name)
    deprecation = DEPRECATED.get(policy)
    return PRESETS[deprecation.replaced_by if deprecation else policy], deprecation


def current_names() -> list[str]:
    """The cachePolicy values to offer: every preset that is not deprecated."""
    return [str(name) for name in PRESETS]


def is_efs(provisioner: str) -> bool:
    return provisioner == EFS_PROVISIONER
