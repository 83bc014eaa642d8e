"""docs/reference/kernel-behaviour.md, rendered from the kernel lab's measured facts."""

from mountwarden.core.options.kernelfacts import FACTS_FILE
from mountwarden.core.options.normalize import kernel_io_size

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
        f"Measured on Linux `{facts['kernel']}` (Debian 12) in the kernel lab (`mountwarden lab`): the kernel's "
        "own NFS client and server in one QEMU VM, each client an independent network namespace (its own "
        f"NFS client, superblocks, caches and connections). The server offers rsize/wsize up to "
        f"{server['max_block_size']} and grants no delegations, as EFS grants none. The kernel tests "
        "(`tests/kernel`) assert the same facts on every `make test`.", "",
        "## Which mounts share a superblock", "",
        "Two mounts of one export through one client, the second differing in one option. A shared superblock "
        "keeps the options of the mount that created it: the second silently runs with those.", "",
        _sharing_summary(facts["superblock_sharing"]), "",
    ]
    rows = []
    for case in facts["superblock_sharing"]:
        name = case["first"].split(",")[-1].split("=")[0].removeprefix("no")
        runs_with = _option_value(case["second_effective"], name) if case["shared"] else "its own options"
        rows.append([_code(case["first"]), _code(case["second"]), "**shared**" if case["shared"] else "separate",
                     _code(runs_with) if case["shared"] else runs_with])
    lines += _table(["first mount", "second mount", "superblock", "the second mount runs with"], rows)
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


def _sharing_summary(cases: list[dict]) -> str:
    shared = [case["first"] for case in cases if case["shared"]]
    separate = [case["first"] for case in cases if not case["shared"]]
    return (f"Measured: the kernel shares a superblock between mounts that differ in {', '.join(map(_code, shared))} "
            "(the per-mount flags noatime and nosuid stay the mount's own; NFSv4 ignores nolock and local_lock "
            f"anyway, NFSv3 compares them), and gives a superblock of its own to a mount that differs in {', '.join(map(_code, separate))}. "
            "So the options a later mount can silently lose to a shared superblock are timeo, retrans, resvport and "
            "nconnect. `nosharecache` always gives a mount a superblock of its own, but nfs(5) calls that a data "
            "risk: multiple cached copies of the same file on one client can become out of sync after a local "
            "update of one of them. Prefer giving the mounts of one export on a node the same values of those options.")


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
