"""docs/reference/kernel-behaviour.md, rendered from the kernel lab's measured facts."""

from mountwarden.core.options.kernelfacts import FACTS_FILE
from mountwarden.core.options.normalize import (
    IGNORED_ON_NFS4,
    IGNORED_OPTIONS,
    INHERITED_THROUGH_SUPERBLOCK,
    PER_MOUNT_OPTIONS,
    kernel_io_size,
    normalize,
)
from mountwarden.lab.experiments import LIVE_SHARING_CASES, NOT_MEASURED
from mountwarden.lab.factscheck import RPC_TOLERANCE_CALLS, RPC_TOLERANCE_SHARE, STALENESS_TOLERANCE_SECONDS

HEADER = (f"<!-- Generated from operator/mountwarden/core/options/{FACTS_FILE} by `mountwarden docs` (make docs); "
          "measure again with `make kernel-facts`. Do not edit. -->\n\n")


def _code(options) -> str:
    text = ",".join(options) if isinstance(options, list) else str(options)
    return f"`{text}`" if text else ""


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]


def _option_value(options: list[str], name: str) -> str:
    for option in options:
        if option == name or option.startswith(f"{name}=") or option == f"no{name}":
            return option
    return "(not printed)"


def render(facts: dict) -> str:
    server = facts["server"]
    lines = [
        HEADER + "# Kernel behaviour, measured", "",
        f"Measured on {facts.get('measured', 'an unrecorded day')} on Linux `{facts['kernel']}` (Debian 12) in the "
        "kernel lab (`mountwarden lab`): the kernel's own NFS client and server in one QEMU VM, each client an "
        "independent network namespace (its own NFS client, superblocks, caches and connections). The server "
        f"offers rsize/wsize up to {server['max_block_size']} and grants "
        f"{'delegations' if server['delegations'] else 'no delegations'}, as EFS grants none (measured: no DELEG "
        "line in /proc/locks for a file a client holds open).", "",
        "Every `make test` measures the facts the kernel gives the same on every run again "
        "(`tests/kernel/test_kernel_facts_live.py`: the release, the server, the pairs of the sharing table marked "
        "*live* below, nconnect, rsize/wsize, the printed options and the locks) and compares them with this file "
        "exactly; it compares each preset's staleness within "
        f"{STALENESS_TOLERANCE_SECONDS:g} s (0 s and \"still missing\" exactly) and the RPCs of each workload within "
        f"{RPC_TOLERANCE_CALLS} or {RPC_TOLERANCE_SHARE:.0%}, whichever is larger (`tests/kernel/test_presets.py`). "
        "The lab reads /proc a second time as plain text and stat() and checks the parsers against it "
        "(`tests/kernel/test_raw_reading.py`).", "",
        "## Which mounts share a superblock", "",
        "Two mounts of one export through one client, the second differing in one option, every option of "
        "nfs(5) a StorageClass or PV can carry that the lab can serve. The kernel compares the file system (the "
        "server's fsid), not the path: two paths of one export share a superblock like two mounts of the same "
        "path. A shared superblock keeps the options of the mount that created it, and lives while any mount "
        "holds it: a later mount silently runs with those.", "",
        *_sharing_summary(facts["superblock_sharing"]), "",
    ]
    live = {first for first, _ in LIVE_SHARING_CASES}
    rows = []
    for case in facts["superblock_sharing"]:
        if case["shared"] is None:
            outcome, runs_with = "refused", case["refused"]
        elif case["shared"]:
            name = _differing_name(case)
            outcome, runs_with = "**shared**", _code(_option_value(case["second_effective"], name))
        else:
            outcome, runs_with = "separate", "its own options"
        rows.append([_code(case["first"]), _code(case["second"]) or "(none)", outcome, runs_with,
                     "live" if case["first"] in live else ""])
    lines += _table(["first mount", "second mount", "superblock", "the second mount runs with", "every make test"],
                    rows)
    lines += ["Not measured, and why:", "", *(f"- `{name}`: {why}." for name, why in sorted(NOT_MEASURED.items())),
              "- the options of mount.nfs and efs-utils (`bg`, `retry`, `tls`, `accesspoint`...): they never reach "
              "the kernel.", ""]
    nconnect = facts["nconnect"]
    lines += [
        "## nconnect", "",
        f"One client, mounts asking nconnect={', '.join(map(str, nconnect['asked']))} in that order (different "
        f"exports, so no superblock is shared): transports per mount (xprt lines in mountstats) "
        f"{nconnect['transports']}, nconnect printed {nconnect['printed']}. The first mount to a server decides "
        "the connections of every later mount of it.", "",
        "## rsize and wsize", "",
    ]
    rows = []
    for outcome in facts["io_sizes"]:
        predicted = kernel_io_size(outcome["asked"], outcome["server_max"])
        rows.append([str(outcome["asked"]), str(outcome["rsize"]), str(outcome["wsize"]), str(predicted)])
    lines += _table(["asked (rsize=wsize=)", "kernel rsize", "kernel wsize", "mountwarden predicts"], rows)
    lines += ["## What mountinfo and mountstats print", "",
              "Each preset as a profile on EFS mounts it. Neither file prints an option at its default (`cto`, "
              "`lookupcache=all`); mountinfo also leaves out the attribute-cache times at their defaults, which "
              "mountstats always prints. The agent fills in the defaults.", ""]
    rows = [[name, _code(printed["asked"]), _code(printed["mountinfo"]), _code(printed["mountstats"])]
            for name, printed in facts["printed_options"].items()]
    lines += _table(["preset", "asked", "mountinfo (superblock options)", "mountstats opts:"], rows)
    lines += ["## Locks", "",
              "Two clients mount with the same options; the first holds an exclusive POSIX lock, the second "
              "tries to take it.", ""]
    rows = [[f"NFSv{o['version']}", _code(o["options"]), "**granted**" if o["second_client_granted"] else "refused",
             _code(o["effective_lock_options"])] for o in facts["locking"]]
    lines += _table(["version", "options", "the second client's lock", "in effect"], rows)
    seconds = facts["coherence_seconds"]
    lines += _presets_section(facts["presets"], seconds, "## Cost and staleness per preset")
    if facts.get("former_presets"):
        lines.append("")
        lines += _presets_section(facts["former_presets"], seconds, "## Deprecated presets, as they were",
                                  "The options a deprecated preset had before it was redefined (a profile naming it "
                                  "now gets its replacement's options through a new StorageClass version), measured "
                                  "the same way: the evidence for the change.")
    return "\n".join(lines)


def _differing_name(case: dict) -> str:
    first, second = normalize(case["first"]).options, normalize(case["second"]).options
    return next((name for name in first if first.get(name) != second.get(name)), case["first"].split("=")[0])


def _names(names) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _sharing_summary(cases: list[dict]) -> list[str]:
    separate = sorted({_differing_name(case) for case in cases if case["shared"] is False})
    return [
        f"- **Inherited** (not compared; the later mount runs with the first one's value): "
        f"{_names(INHERITED_THROUGH_SUPERBLOCK)}. These are what a SuperblockShared finding explains.",
        f"- **The mount's own** (shared superblock, each mount keeps its flag): {_names(PER_MOUNT_OPTIONS)}.",
        f"- **Ignored** (shared, and nothing shows them): {_names(IGNORED_OPTIONS)}; on NFSv4 also "
        f"{_names(IGNORED_ON_NFS4)}, which NFSv3 compares.",
        f"- **A superblock of its own** when they differ: {_names(separate)}. `nosharecache` always gives one, but "
        "nfs(5) calls that a data risk: multiple cached copies of the same file on one client can become out of "
        "sync after a local update of one of them. Prefer giving the mounts of one file system on a node the same "
        "values of the inherited options.",
    ]


def _presets_section(presets: dict, seconds: float, title: str, intro: str = "") -> list[str]:
    lines = [title, ""]
    if intro:
        lines += [intro, ""]
    lines += [f"A writer on another client appends and closes every 0.25 s for {seconds:.0f} s; one reader "
              "stat()s the path every 0.05 s, another open()s and fstat()s it. Staleness is the worst age of a "
              "size a reader saw (from the close of the first write it had not seen). New file: two readers on "
              "clients of their own look a name up and fail, then the writer creates it; how long each still fails, "
              f"by stat() and by open() of the path (\"missing\": still not found after {seconds:.0f} s). Cost is "
              "the RPCs of 50 stat() calls 0.1 s apart, of 50 stat() calls of a missing name, of 50 open()/close() "
              "pairs 0.1 s apart, and of `ls -l` of 50 files.", ""]
    rows = []
    for name, measured in presets.items():
        coherence, cost = measured["coherence"], measured["cost"]
        negative = measured.get("negative_lookups")
        rows.append([name, _code(measured["options"]),
                     f"{coherence['stat_by_path']['worst_seconds']:.2f} s",
                     f"{coherence['open_fstat']['worst_seconds']:.2f} s",
                     _found(negative, "stat_by_path"), _found(negative, "open_by_path"),
                     _ops(cost["stat_loop"]), _ops(cost["missing_stat_loop"]) if "missing_stat_loop" in cost else "",
                     _ops(cost["open_close_loop"]), _ops(cost["ls_l"])])
    lines += _table(["preset", "mounted with", "stat() staleness", "open()+fstat() staleness",
                     "new file by stat()", "new file by open()", "50 stat()", "50 stat() of a missing name",
                     "50 open()/close()", "ls -l of 50"], rows)
    return lines


def _found(negative: dict | None, reader: str) -> str:
    if negative is None:
        return "not measured"
    seconds = negative[reader]["found_after_seconds"]
    return "missing" if seconds is None else f"{seconds:.2f} s"


def _ops(counts: dict) -> str:
    parts = [f"{name} {count}" for name, count in counts.items() if name != "total"]
    return f"{counts['total']} ({', '.join(parts)})" if parts else "0"
