"""Named cache policies, each with its staleness bound and its cost per operation.

One policy shared by every consumer hurts one of them: ``strict`` made an
importer on EFS take 8 hours, ``cached`` broke an upload service that relied on
fresh attributes. A preset names the trade-off so each consumer picks its own.
"""

from dataclasses import dataclass
from enum import StrEnum

EFS_PROVISIONER = "efs.csi.aws.com"

#: What AWS recommends for every EFS mount, under any preset.
EFS_BASELINE: tuple[str, ...] = (
    "vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
)


class CachePolicy(StrEnum):
    STRICT = "strict"
    COHERENT = "coherent"
    CACHED = "cached"
    READ_ONLY = "read-only"


@dataclass(frozen=True, slots=True)
class Preset:
    name: CachePolicy
    options: tuple[str, ...]
    use_for: str
    staleness: str
    cost: str


PRESETS: dict[CachePolicy, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            CachePolicy.STRICT,
            ("actimeo=0", "lookupcache=none"),
            use_for="Data that several clients change and must see at once, with few operations per second.",
            staleness="None: every stat and every path lookup asks the server.",
            cost="Every stat() and open() revalidates each component of the path: 5 round trips per stat() "
                 "of a file two directories down (kernel lab), each metered as 4 KiB on EFS: a 20 GiB Bursting "
                 "file system with no credits left does only 256 of them per second.",
        ),
        Preset(
            CachePolicy.COHERENT,
            ("cto", "lookupcache=positive", "acregmax=3"),
            use_for="Multi-writer staging directories: uploads assembled from chunks, spools, shared work queues.",
            staleness="A file's size and mtime at most 3 s old; a newly created file is seen at once; "
                      "open() after another client's close() sees its writes (close-to-open).",
            cost="A GETATTR per open and at most one per file every 3 s; failed lookups always go to the server.",
        ),
        Preset(
            CachePolicy.CACHED,
            ("actimeo=600", "lookupcache=all"),
            use_for="Scratch space and single-writer data: importers, build caches, a SQLite scratch volume.",
            staleness="Up to 10 minutes for changes made by other clients (own changes are seen at once).",
            cost="Almost no metadata round trips: the file system's budget goes to data.",
        ),
        Preset(
            CachePolicy.READ_ONLY,
            ("ro", "actimeo=600", "nocto", "lookupcache=all"),
            use_for="Static content nobody writes while it is mounted: models, assets, reference data.",
            staleness="Up to 10 minutes for stat() by path; open() still sees fresh attributes on NFSv4, where "
                      "every open is an OPEN round trip (kernel lab). Only for data that does not change.",
            cost="Almost no metadata round trips, as cached: nocto saves nothing on NFSv4 without delegations "
                 "(EFS grants none), where each open()+close() is an OPEN and a CLOSE anyway (kernel lab).",
        ),
    )
}


def is_efs(provisioner: str) -> bool:
    return provisioner == EFS_PROVISIONER
