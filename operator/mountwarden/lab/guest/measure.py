"""Mount sequences run inside the lab VM in one go, read back raw (standard library only).

    measure.py < PROGRAM.json

PROGRAM is a list of steps; the script prints a JSON list with one result per step. Nothing
here uses mountwarden's parsers: it is the lab's second, independent reading of /proc, which
the host compares with what the parsers make of the same text (mountwarden.lab.experiments).

Steps:
    {"op": "mount", "client": NETNS, "source": "ADDR:/export", "options": "...", "at": PATH}
        mount(8) through the network namespace's NFS client; {"mounted": bool, "error": text}.
    {"op": "umount", "at": [PATH, ...]}
        Unmounts each, last first; {"unmounted": [PATH, ...]}.
    {"op": "client_gone", "client": NETNS, "timeout": SECONDS}
        Waits until the namespace's /proc/fs/nfsfs/servers lists no NFS client (the kernel frees
        a client with its last superblock): the next mount through it starts a fresh client.
    {"op": "capture", "at": [PATH, ...]}
        Per mount point: its /proc/1/mountinfo lines and /proc/1/mountstats blocks as printed,
        the device of stat() of it, and the xprt: lines counted in the raw block.
    {"op": "lock_probe", "first": PATH, "second": PATH}
        Holds an exclusive POSIX lock on PATH through the first mount and lets another process
        try the same file through the second; /proc/locks' lines of the file (matched by its
        inode) while the lock is held. {"granted": bool, "inode": N, "lock_lines": [...]}.
    {"op": "delegation_probe", "at": PATH}
        Creates a fresh file through the mount and keeps it open for reading; /proc/locks'
        DELEG lines of that file meanwhile, and /proc/sys/fs/leases-enable.
    {"op": "kernel"}
        The release (uname -r) and nfsd's max_block_size.
"""

import fcntl
import json
import os
import subprocess
import sys
import time


def unescape(field):
    """A mountinfo field as the kernel escapes it (space, tab, newline, backslash as \\ooo)."""
    out, index = [], 0
    while index < len(field):
        if field[index] == "\\" and field[index + 1:index + 4].isdigit():
            out.append(chr(int(field[index + 1:index + 4], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def read(path):
    with open(path) as handle:
        return handle.read()


def mount(step):
    os.makedirs(step["at"], exist_ok=True)
    command = ["nsenter", f"--net=/run/netns/{step['client']}", "mount", "-t", "nfs"]
    if step.get("options"):
        command += ["-o", step["options"]]
    done = subprocess.run([*command, step["source"], step["at"]], capture_output=True, text=True, timeout=300)
    error = (done.stderr + done.stdout).strip()
    return {"mounted": done.returncode == 0, "error": error if done.returncode else ""}


def umount(step):
    unmounted = []
    for point in reversed(step["at"]):
        if subprocess.run(["umount", point], capture_output=True, timeout=300).returncode == 0:
            unmounted.append(point)
    return {"unmounted": unmounted}


def clients(namespace):
    done = subprocess.run(["nsenter", f"--net=/run/netns/{namespace}", "cat", "/proc/fs/nfsfs/servers"],
                          capture_output=True, text=True, timeout=60)
    return [line for line in done.stdout.splitlines()[1:] if line.strip()]


def client_gone(step):
    started = time.monotonic()
    while True:
        left = clients(step["client"])
        if not left:
            return {"seconds": round(time.monotonic() - started, 2)}
        if time.monotonic() - started > step.get("timeout", 120):
            return {"error": f"NFS client(s) still in {step['client']}: {left}"}
        time.sleep(0.1)


def mountstats_blocks(text):
    """{mount point: [block, ...]} of /proc/1/mountstats, each block as printed."""
    blocks = {}
    current = None
    for line in text.split("\n"):
        if line.startswith("device "):
            words = line.split(" mounted on ", 1)
            point = words[1].rsplit(" with fstype ", 1)[0] if len(words) == 2 else ""
            current = [line]
            blocks.setdefault(point, []).append(current)
        elif current is not None:
            current.append(line)
    return {point: ["\n".join(block).rstrip("\n") for block in found] for point, found in blocks.items()}


def capture(step):
    mountinfo = read("/proc/1/mountinfo").splitlines()
    blocks = mountstats_blocks(read("/proc/1/mountstats"))
    captured = {}
    for point in step["at"]:
        lines = [line for line in mountinfo if unescape(line.split(" ")[4]) == point]
        found = blocks.get(point, [])
        try:
            device = os.stat(point).st_dev
            stat_device = f"{os.major(device)}:{os.minor(device)}"
        except OSError as error:
            stat_device = f"error: {error}"
        captured[point] = {
            "mountinfo": lines,
            "mountstats": found,
            "stat_device": stat_device,
            "xprt_lines": [sum(1 for line in block.split("\n") if line.strip().startswith("xprt:"))
                           for block in found],
        }
    return captured


PROBE = ("import fcntl, sys\nf = open(sys.argv[1], 'r+')\ntry:\n    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
         "    print('granted')\nexcept OSError:\n    print('refused')")


def lines_of(inode, kind=None):
    """/proc/locks lines whose file is ``inode`` (the third part of MAJ:MIN:INODE), as printed."""
    found = []
    for line in read("/proc/locks").splitlines():
        fields = line.split()
        where = next((field for field in fields if field.count(":") == 2), "")
        if where.rsplit(":", 1)[-1] == str(inode) and (kind is None or kind in fields):
            found.append(line)
    return found


def lock_probe(step):
    with open(step["first"], "w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)
        inode = os.fstat(held.fileno()).st_ino
        probed = subprocess.run([sys.executable, "-c", PROBE, step["second"]], capture_output=True, text=True,
                                timeout=300)
        lock_lines = lines_of(inode)
    return {"granted": probed.stdout.strip() == "granted", "probe": probed.stdout.strip() + probed.stderr.strip(),
            "inode": inode, "lock_lines": lock_lines}


def delegation_probe(step):
    path = os.path.join(step["at"], f"delegation-probe-{os.getpid()}-{time.monotonic_ns()}")
    with open(path, "w") as handle:
        handle.write("probe\n")
    with open(path) as reader:
        reader.read()
        inode = os.fstat(reader.fileno()).st_ino
        delegations = lines_of(inode, "DELEG")
    return {"inode": inode, "deleg_lines": delegations, "leases_enable": read("/proc/sys/fs/leases-enable").strip()}


def kernel(_step):
    return {"release": os.uname().release, "max_block_size": int(read("/proc/fs/nfsd/max_block_size"))}


OPS = {"mount": mount, "umount": umount, "client_gone": client_gone, "capture": capture, "lock_probe": lock_probe,
       "delegation_probe": delegation_probe, "kernel": kernel}

if __name__ == "__main__":
    results = []
    for step in json.load(sys.stdin):
        started = time.monotonic()
        result = OPS[step["op"]](step)
        result["seconds"] = round(time.monotonic() - started, 2)
        results.append(result)
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
