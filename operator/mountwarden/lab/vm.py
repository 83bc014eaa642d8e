"""Boot the lab image in QEMU and run commands inside it.

The VM has no network device: NFS runs over the guest's own loopback. Three 9p shares
connect it to the host: the mountwarden package (read-only, so the guest runs the code
under test, not a copy), its Python dependencies (read-only) and a per-VM directory for
files in and out (read-write, ``/mnt/lab-io`` in the guest). Commands go over a
virtio-serial port to the guest's command daemon (guest/labd.py); the serial console is
kept in ``console.log`` for the error that explains a failed boot.

KVM is used only where a stock kernel can boot on it: on a PVM host (``/sys/module/kvm_pvm``)
Debian's kernel stalls in its decompressor, so TCG is the fallback, never a skip.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mountwarden
from mountwarden.lab.image import LabImage

GUEST_IO = "/mnt/lab-io"
GUEST_CODE = "/mnt/lab-code"
GUEST_DEPS = "/mnt/lab-deps"
GUEST_DIR = f"{GUEST_CODE}/mountwarden/lab/guest"
#: The environment under which the guest runs mountwarden itself.
GUEST_PYTHON_ENV = {
    "PYTHONPATH": f"{GUEST_DEPS}:{GUEST_CODE}",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "COLUMNS": "200",
}
READY_MARKER = "MOUNTWARDEN-LAB: ready"
ACCEL_ENV = "MOUNTWARDEN_LAB_ACCEL"


class LabError(RuntimeError):
    """The VM failed to boot, died, or stopped answering; the message carries the console's tail."""


@dataclass(frozen=True)
class GuestResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def json(self):
        return json.loads(self.stdout)


class LabCommandError(LabError):
    def __init__(self, result: GuestResult) -> None:
        what = "timed out" if result.timed_out else f"exited {result.rc}"
        super().__init__(
            f"in the lab VM, `{shlex.join(result.argv)}` {what}:\n{result.stderr.strip()[-3000:]}"
            f"\n{result.stdout.strip()[-1000:]}".rstrip()
        )
        self.result = result


def choose_accelerator() -> str:
    """kvm where a stock kernel boots on it, else tcg (also forced by $MOUNTWARDEN_LAB_ACCEL)."""
    forced = os.environ.get(ACCEL_ENV)
    if forced:
        return forced
    if Path("/sys/module/kvm_pvm").exists():
        return "tcg"
    try:
        with open("/dev/kvm", "rb"):
            return "kvm"
    except OSError:
        return "tcg"


def code_root() -> Path:
    """The directory holding the mountwarden package (the checkout's operator/, or site-packages)."""
    return Path(mountwarden.__file__).resolve().parent.parent


@dataclass
class LabVM:
    """One VM; use as a context manager so that it is always torn down."""

    image: LabImage
    memory_mib: int = 1024
    cpus: int = 2
    #: Extra QEMU arguments (a real node adds user networking).
    extra_args: Sequence[str] = ()
    #: Starts QEMU (argv, log path) and returns its Popen; the dev cluster passes one that records it.
    launcher: Callable[[Sequence[str], Path], subprocess.Popen] | None = None
    #: Under TCG a boot takes 25-60 s on 2 idle cores and several times that when they are busy.
    boot_timeout: float = 600.0
    workdir: Path | None = None
    accelerator: str = field(default_factory=choose_accelerator)
    boot_seconds: float | None = None
    kernel_release: str = ""

    _process: subprocess.Popen | None = field(default=None, repr=False)
    _socket: socket.socket | None = field(default=None, repr=False)
    _pending: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ids: itertools.count = field(default_factory=itertools.count, repr=False)
    _own_workdir: bool = field(default=False, repr=False)
    _closed: threading.Event = field(default_factory=threading.Event, repr=False)

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> LabVM:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def io_dir(self) -> Path:
        """The host side of the guest's /mnt/lab-io."""
        assert self.workdir is not None
        return self.workdir / "io"

    @property
    def console_log(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "console.log"

    def start(self) -> None:
        self.image.check()
        qemu = shutil.which("qemu-system-x86_64")
        if qemu is None:
            raise LabError("qemu-system-x86_64 is not installed: apt-get install qemu-system-x86 "
                           "(hack/lab/host-deps.sh installs it)")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="mountwarden-lab-"))
            self._own_workdir = True
        self.io_dir.mkdir(parents=True, exist_ok=True)
        control = self.workdir / "control.sock"
        control.unlink(missing_ok=True)
        started = time.monotonic()
        argv = [qemu, *self.qemu_args(control)]
        if self.launcher is not None:
            self._process = self.launcher(argv, self.workdir / "qemu.log")
        else:
            with open(self.workdir / "qemu.log", "wb") as log:
                self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                 stderr=log, start_new_session=True)
        try:
            self._connect(control, started)
            self._wait_for_console(READY_MARKER, started)
            reply = self._request({"op": "ping"}, timeout=60)
            self.kernel_release = reply.get("kernel", "")
            self.boot_seconds = time.monotonic() - started
        except BaseException:
            self.stop()
            raise

    def qemu_args(self, control: Path) -> list[str]:
        if self.accelerator == "kvm":
            accel = ["-accel", "kvm", "-cpu", "host"]
        else:
            accel = ["-accel", "tcg,tb-size=256", "-cpu", "max"]
        shares = (
            (code_root(), "lab-code", True),
            (self.image.python_deps.resolve(), "lab-deps", True),
            (self.io_dir, "lab-io", False),
        )
        virtfs = []
        for path, tag, read_only in shares:
            spec = f"local,path={path},mount_tag={tag},security_model=none"
            virtfs += ["-virtfs", spec + (",readonly=on" if read_only else "")]
        return [
            *accel, "-m", str(self.memory_mib), "-smp", str(self.cpus),
            "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd),
            "-append", "console=ttyS0 quiet panic=-1 rdinit=/init",
            "-display", "none", "-nodefaults", "-no-reboot", "-monitor", "none",
            "-serial", f"file:{self.console_log}",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=labctl,path={control},server=on,wait=off",
            "-device", "virtserialport,chardev=labctl,name=lab.ctl",
            *virtfs,
            *self.extra_args,
        ]

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _connect(self, control: Path, started: float) -> None:
        while not control.exists():
            self._check_boot(started, "waiting for QEMU's control socket")
            time.sleep(0.05)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(control))
        self._socket = sock
        threading.Thread(target=self._read_replies, name="lab-replies", daemon=True).start()

    def _wait_for_console(self, marker: str, started: float) -> None:
        while marker not in self.console_text():
            self._check_boot(started, f"waiting for {marker!r}")
            time.sleep(0.1)

    def _check_boot(self, started: float, doing: str) -> None:
        if not self.alive:
            raise LabError(f"the lab VM exited while {doing}:\n{self.failure_context()}")
        if time.monotonic() - started > self.boot_timeout:
            raise LabError(f"the lab VM did not boot in {self.boot_timeout:.0f} s ({doing}; "
                           f"accelerator {self.accelerator}):\n{self.failure_context()}")

    def console_text(self) -> str:
        try:
            return self.console_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def failure_context(self, lines: int = 25) -> str:
        console = "\n".join(self.console_text().splitlines()[-lines:])
        qemu = ""
        if self.workdir is not None and (self.workdir / "qemu.log").exists():
            qemu = (self.workdir / "qemu.log").read_text(errors="replace").strip()
        return f"--- console (last {lines} lines) ---\n{console}" + (f"\n--- qemu ---\n{qemu}" if qemu else "")

    def stop(self, timeout: float = 30.0) -> None:
        """Power the guest off (or kill QEMU when it does not answer) and remove what it left."""
        if self._process is not None:
            if self.alive and self._socket is not None:
                with contextlib.suppress(LabError):
                    self._request({"op": "poweroff"}, timeout=10)
            try:
                self._process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.close()
            self._socket = None
        self._closed.set()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- requests --------------------------------------------------------------------------------

    def _read_replies(self) -> None:
        buffer = b""
        sock = self._socket
        while sock is not None:
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                reply = json.loads(line)
                with self._lock:
                    waiter = self._pending.get(reply.get("id"))
                if waiter is not None:
                    waiter["reply"] = reply
                    waiter["event"].set()
        with self._lock:  # the VM is gone: nobody waits for an answer that cannot come
            for waiter in self._pending.values():
                waiter["event"].set()

    def _request(self, message: dict, *, timeout: float) -> dict:
        if self._socket is None:
            raise LabError("the lab VM is not running")
        request_id = next(self._ids)
        waiter = {"event": threading.Event(), "reply": None}
        with self._lock:
            self._pending[request_id] = waiter
        try:
            self._socket.sendall((json.dumps({**message, "id": request_id}) + "\n").encode())
            if not waiter["event"].wait(timeout):
                raise LabError(f"the lab VM did not answer {message.get('op')} in {timeout:.0f} s:\n"
                               f"{self.failure_context()}")
        except OSError as error:
            raise LabError(f"the lab VM's control channel broke ({error}):\n{self.failure_context()}") from error
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        if waiter["reply"] is None:
            raise LabError(f"the lab VM went away during {message.get('op')}:\n{self.failure_context()}")
        return waiter["reply"]

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        timeout: float = 120.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> GuestResult:
        """Run a command in the guest (a string runs under sh -c); with check, a failure raises."""
        command = ["sh", "-c", argv] if isinstance(argv, str) else list(argv)
        message = {"op": "run", "argv": command, "timeout": timeout, "input": input, "env": dict(env or {})}
        reply = self._request(message, timeout=timeout + 30)
        if "error" in reply:
            raise LabError(f"the lab VM refused the request: {reply['error']}")
        result = GuestResult(tuple(command), reply["rc"], reply["stdout"], reply["stderr"], reply["seconds"],
                             reply.get("timed_out", False))
        if check and not result.ok:
            raise LabCommandError(result)
        return result

    def mountwarden(self, *args: str, timeout: float = 300.0, check: bool = True) -> GuestResult:
        """Run the mountwarden CLI inside the guest, from the host's code, against the guest's live /proc."""
        return self.run(["python3", "-m", "mountwarden", *args], timeout=timeout, env=GUEST_PYTHON_ENV,
                        check=check)

    def python(self, script: str, *args: str, timeout: float = 300.0, check: bool = True) -> GuestResult:
        """Run a Python script (source text) in the guest, with mountwarden importable."""
        return self.run(["python3", "-c", script, *args], timeout=timeout, env=GUEST_PYTHON_ENV, check=check)

    def read_text(self, guest_path: str) -> str:
        return self.run(["cat", guest_path], timeout=60).stdout


def start_nfs_server(vm: LabVM, *, max_block_size: int = 1024 * 1024, delegations: bool = False,
                     exports: Sequence[str] = ("/srv/export",)) -> str:
    """Start the kernel NFS server in the VM, exporting a tmpfs at each path; returns its log line.

    Without delegations (the default) the server behaves as EFS does, which grants none.
    """
    result = vm.run(["sh", f"{GUEST_DIR}/nfs-server.sh", str(max_block_size), str(int(delegations)), *exports],
                    timeout=180)
    return result.stdout.strip()
