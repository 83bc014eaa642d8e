"""The lab VM's command daemon: runs what the host asks, over a virtio-serial port.

Runs inside the VM as the last step of /init, with only Python's standard library.
The protocol is one JSON object per line in each direction:

    host -> guest  {"id": 7, "op": "run", "argv": [...], "timeout": 60, "input": null, "env": {}}
    guest -> host  {"id": 7, "rc": 0, "stdout": "...", "stderr": "...", "seconds": 0.42, "timed_out": false}

    {"id": 8, "op": "ping"}      -> {"id": 8, "kernel": "6.1.0-...", "pong": true}
    {"id": 9, "op": "poweroff"}  -> {"id": 9, "rc": 0}, then the daemon exits and /init powers off.

Each request runs in its own thread, so a command stuck on a dead NFS server (in the
kernel's uninterruptible sleep, which no signal ends) never blocks the others: after
its timeout the daemon answers `timed_out` with the kernel stack of each of the
command's tasks (where each one waits, for the failure message) and leaves the process
behind.
"""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

PORT_NAME = "lab.ctl"
GRACE_AFTER_KILL = 2.0


def find_port() -> Path:
    for entry in Path("/sys/class/virtio-ports").iterdir():
        if (entry / "name").read_text().strip() == PORT_NAME:
            return Path("/dev") / entry.name
    raise SystemExit(f"labd: no virtio-serial port named {PORT_NAME}")


class Daemon:
    def __init__(self, port: Path) -> None:
        # A virtio-serial port can be open only once: one descriptor for both directions.
        self.fd = os.open(port, os.O_RDWR)
        self.write_lock = threading.Lock()
        self.stopping = threading.Event()

    def send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self.write_lock:
            while data:
                data = data[os.write(self.fd, data):]

    def serve(self) -> None:
        self.announce("ready")
        buffer = b""
        while not self.stopping.is_set():
            chunk = os.read(self.fd, 65536)
            if not chunk:
                time.sleep(0.05)  # the host is not connected (yet): the port reads as empty
                continue
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    self.dispatch(json.loads(line))

    def announce(self, what: str) -> None:
        with open("/dev/console", "w") as console:
            console.write(f"MOUNTWARDEN-LAB: {what}\n")

    def dispatch(self, request: dict) -> None:
        op = request.get("op")
        if op == "ping":
            self.send({"id": request["id"], "pong": True, "kernel": os.uname().release})
        elif op == "poweroff":
            self.send({"id": request["id"], "rc": 0})
            self.stopping.set()
        elif op == "run":
            threading.Thread(target=self.run, args=(request,), daemon=True).start()
        else:
            self.send({"id": request.get("id"), "error": f"unknown op {op!r}"})

    def run(self, request: dict) -> None:
        started = time.monotonic()
        env = dict(os.environ, **request.get("env", {}))
        reply: dict = {"id": request["id"], "timed_out": False}
        try:
            process = subprocess.Popen(
                request["argv"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=request.get("cwd") or "/", start_new_session=True,
            )
        except OSError as error:
            reply.update(rc=127, stdout="", stderr=f"labd: cannot run {request['argv'][0]}: {error}\n")
            reply["seconds"] = time.monotonic() - started
            self.send(reply)
            return
        data = request.get("input")
        try:
            out, err = process.communicate(data.encode() if data is not None else None, timeout=request.get("timeout"))
        except subprocess.TimeoutExpired:
            reply["timed_out"] = True
            stacks = kernel_stacks(process.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            try:
                out, err = process.communicate(timeout=GRACE_AFTER_KILL)
                err += f"labd: timed out; where its tasks were, before SIGKILL:\n{stacks}".encode()
            except subprocess.TimeoutExpired:  # in uninterruptible sleep: leave it behind
                out, err = b"", (f"labd: the process did not end after SIGKILL (uninterruptible sleep?); its tasks "
                                 f"now:\n{kernel_stacks(process.pid)}\nand before SIGKILL:\n{stacks}").encode()
        reply.update(
            rc=process.returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            seconds=time.monotonic() - started,
        )
        self.send(reply)


def kernel_stacks(group: int) -> str:
    """Every task of process group ``group``: its state, what it waits in (wchan) and its kernel stack."""
    described = []
    for entry in sorted(Path("/proc").iterdir(), key=lambda path: path.name):
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rfind(")") + 2:].split()[2]) != group:
                continue
            tasks = sorted((entry / "task").iterdir(), key=lambda path: int(path.name))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        for task in tasks:
            parts = []
            for name in ("comm", "stat", "wchan", "stack"):
                try:
                    parts.append((task / name).read_text().strip())
                except OSError as error:
                    parts.append(f"({name}: {error.strerror})")
            comm, task_stat, wchan, stack = parts
            state = task_stat[task_stat.rfind(")") + 2:].split()[0] if ")" in task_stat else "?"
            described.append(f"task {entry.name}/{task.name} ({comm}) state {state} wchan {wchan}\n{stack}")
    return "\n".join(described) or "(no task left in the group)"


if __name__ == "__main__":
    sys.exit(Daemon(find_port()).serve())
