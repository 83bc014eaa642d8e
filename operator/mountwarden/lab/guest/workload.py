"""Workloads run inside the lab VM on real NFS mounts (standard library only).

    workload.py cost SETUP_MOUNT_POINT MOUNT_POINT
        The files are made through SETUP_MOUNT_POINT (a writable mount of the same export:
        the one measured may be read-only); then four workloads on MOUNT_POINT, each with
        the mount's RPC counters read before and after: a paced stat() loop on one file,
        `ls -l` of a directory of 50
        files, a paced open()/close() loop and a paced stat() loop on a name that does not
        exist. Prints JSON: per workload the GETATTR,
        LOOKUP, ACCESS, READDIR(PLUS) and total operation counts it cost.

    workload.py coherence WRITER_MOUNT STAT_READER_MOUNT OPEN_READER_MOUNT SECONDS
        The upload-service race: a writer appends a chunk and closes, every 0.25 s,
        through one client; two readers, each on a client of its own (its own cache),
        check the size every 0.05 s, one by stat() of the path, the other by
        open()+fstat() (an open revalidates under close-to-open and refreshes the cache,
        so one reader doing both would hide what stat() alone sees). Prints JSON: the
        worst staleness of each (seconds from the close of the first write a sample had
        not seen to that sample), and how many samples were stale.

    workload.py lockcache SETUP_MOUNT_POINT MOUNT_POINT
        What a POSIX lock does to the cache (SQLite takes one per transaction): a 1 MiB file made
        through SETUP_MOUNT_POINT is read twice through MOUNT_POINT, then locked and
        read again under a lock. Prints JSON: the READ and GETATTR operations of each read.

    workload.py negative WRITER_MOUNT STAT_READER_MOUNT OPEN_READER_MOUNT SECONDS
        Negative lookup caching: two readers, each on a client of its own, look a name up
        and fail (ENOENT), one by stat(), the other by open(); then the writer creates the
        file through its own client and closes it; each reader retries every 0.05 s until
        it finds the file or SECONDS pass. Prints JSON: per reader how long after the
        writer's close() it first found the file (null: not within SECONDS).
"""

import contextlib
import json
import os
import sys
import threading
import time

PACED_CALLS = 50
PACE_SECONDS = 0.1


def op_counts(mount_point: str) -> dict[str, int]:
    """Per-operation call counts of one mount, from /proc/self/mountstats."""
    counts: dict[str, int] = {}
    inside = False
    in_ops = False
    with open("/proc/self/mountstats") as stats:
        for line in stats:
            if line.startswith("device "):
                inside = line.split()[4] == mount_point
                in_ops = False
                continue
            if not inside:
                continue
            stripped = line.strip()
            if stripped.startswith("per-op statistics"):
                in_ops = True
            elif in_ops and ":" in stripped:
                name, _, numbers = stripped.partition(":")
                fields = numbers.split()
                if fields and fields[0].isdigit():
                    counts[name] = int(fields[0])
    return counts


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The operations a workload cost, by name, and their total."""
    changed = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    result = {name: count for name, count in sorted(changed.items()) if count > 0}
    result["total"] = sum(result.values())
    return result


def measured(mount_point: str, work) -> dict[str, int]:
    before = op_counts(mount_point)
    work()
    return delta(before, op_counts(mount_point))


def cost(setup_mount_point: str, mount_point: str) -> dict:
    name = f"cost-{os.getpid()}"
    made = os.path.join(setup_mount_point, name)
    os.makedirs(os.path.join(made, "tree"))
    with open(os.path.join(made, "file"), "w") as handle:
        handle.write("x" * 100)
    for index in range(50):
        with open(os.path.join(made, "tree", f"f{index:02d}"), "w") as handle:
            handle.write("y")
    base = os.path.join(mount_point, name)
    target = os.path.join(base, "file")

    def stat_loop() -> None:
        for _ in range(PACED_CALLS):
            os.stat(target)
            time.sleep(PACE_SECONDS)

    def list_tree() -> None:  # what `ls -l` does
        directory = os.path.join(base, "tree")
        for name in os.listdir(directory):
            os.lstat(os.path.join(directory, name))

    def open_loop() -> None:
        for _ in range(PACED_CALLS):
            with open(target):
                pass
            time.sleep(PACE_SECONDS)

    def missing_stat_loop() -> None:  # a build tool probing for files that are not there
        missing = os.path.join(base, "missing")
        for _ in range(PACED_CALLS):
            with contextlib.suppress(FileNotFoundError):
                os.stat(missing)
            time.sleep(PACE_SECONDS)

    return {
        "stat_loop": measured(mount_point, stat_loop),
        "ls_l": measured(mount_point, list_tree),
        "open_close_loop": measured(mount_point, open_loop),
        "missing_stat_loop": measured(mount_point, missing_stat_loop),
        "paced_calls": PACED_CALLS,
        "pace_seconds": PACE_SECONDS,
    }


def coherence(writer_mount: str, stat_reader_mount: str, open_reader_mount: str, seconds: float) -> dict:
    name = f"upload-{os.getpid()}.part"
    writer_path = os.path.join(writer_mount, name)
    stat_path = os.path.join(stat_reader_mount, name)
    open_path = os.path.join(open_reader_mount, name)
    with open(writer_path, "w") as handle:
        handle.write("c" * 100)
    closes: list[tuple[float, int]] = [(time.monotonic(), 100)]
    # Let the readers' clients learn the file before the race starts, as the uploads' second request did.
    os.stat(stat_path)
    os.stat(open_path)
    by_path: list[tuple[float, int]] = []
    by_descriptor: list[tuple[float, int]] = []
    stop = threading.Event()

    def write() -> None:
        size = 100
        while not stop.is_set():
            time.sleep(0.25)
            with open(writer_path, "a") as handle:
                handle.write("c" * 100)
            size += 100
            closes.append((time.monotonic(), size))

    def sample(seen: list[tuple[float, int]], size_of) -> None:
        while not stop.is_set():
            # Timed before the call: a close that happens while a call is in flight is not "missed".
            asked = time.monotonic()
            seen.append((asked, size_of()))
            time.sleep(0.05)

    def open_fstat() -> int:
        descriptor = os.open(open_path, os.O_RDONLY)
        try:
            return os.fstat(descriptor).st_size
        finally:
            os.close(descriptor)

    threads = [
        threading.Thread(target=write),
        threading.Thread(target=sample, args=(by_path, lambda: os.stat(stat_path).st_size)),
        threading.Thread(target=sample, args=(by_descriptor, open_fstat)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return {
        "seconds": seconds,
        "writes": len(closes) - 1,
        "stat_by_path": staleness(closes, by_path),
        "open_fstat": staleness(closes, by_descriptor),
    }


def negative(writer_mount: str, stat_reader_mount: str, open_reader_mount: str, seconds: float) -> dict:
    directory = f"negative-{os.getpid()}"
    os.mkdir(os.path.join(writer_mount, directory))
    name = os.path.join(directory, "created-elsewhere")
    readers = {"stat_by_path": (os.path.join(stat_reader_mount, name), os.stat),
               "open_by_path": (os.path.join(open_reader_mount, name), lambda path: os.close(os.open(path, os.O_RDONLY)))}
    for path, look in readers.values():  # the earlier lookup that failed
        try:
            look(path)
        except FileNotFoundError:
            pass
        else:
            raise SystemExit(f"{path} exists before it was created")
    with open(os.path.join(writer_mount, name), "w") as handle:
        handle.write("x")
    created = time.monotonic()
    found: dict[str, float | None] = {}

    def retry(label: str, path: str, look) -> None:
        while time.monotonic() - created < seconds:
            try:
                look(path)
            except FileNotFoundError:
                time.sleep(0.05)
                continue
            found[label] = round(time.monotonic() - created, 3)
            return
        found[label] = None

    threads = [threading.Thread(target=retry, args=(label, path, look)) for label, (path, look) in readers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"seconds": seconds, **{label: {"found_after_seconds": found[label]} for label in readers}}


def lockcache(setup_mount_point: str, mount_point: str) -> dict:
    import fcntl

    name = f"lockcache-{os.getpid()}"
    with open(os.path.join(setup_mount_point, name), "wb") as handle:
        handle.write(os.urandom(1024 * 1024))
    path = os.path.join(mount_point, name)

    def read() -> None:
        with open(path, "rb") as handle:
            while handle.read(65536):
                pass

    def reads(counts: dict[str, int]) -> dict[str, int]:
        return {op: counts.get(op, 0) for op in ("READ", "GETATTR")}

    first = reads(measured(mount_point, read))
    again = reads(measured(mount_point, read))
    # One open for the lock and the read after it: the read is what the lock may have made expensive.
    with open(path, "rb") as handle:
        fcntl.lockf(handle, fcntl.LOCK_SH)
        locked = reads(measured(mount_point, lambda: [None for _ in iter(lambda: handle.read(65536), b"")]))
        fcntl.lockf(handle, fcntl.LOCK_UN)
    return {"first_read": first, "second_read": again, "read_under_a_lock": locked}


def staleness(closes: list[tuple[float, int]], seen: list[tuple[float, int]]) -> dict:
    """Worst age of what a reader saw: now minus the close of the first write it had not seen."""
    worst = 0.0
    stale = 0
    for when, size in seen:
        newer = [closed for closed, grown in closes if grown > size and closed <= when]
        if newer:
            stale += 1
            worst = max(worst, when - min(newer))
    return {"worst_seconds": round(worst, 3), "stale_samples": stale, "samples": len(seen)}


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "cost":
        result = cost(sys.argv[2], sys.argv[3])
    elif command == "coherence":
        result = coherence(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif command == "lockcache":
        result = lockcache(sys.argv[2], sys.argv[3])
    elif command == "negative":
        result = negative(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        raise SystemExit(f"unknown workload {command}")
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
