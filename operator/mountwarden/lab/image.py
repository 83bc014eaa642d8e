"""The kernel lab's image: a Debian 12 kernel with its NFS modules and a minimal root, from Debian packages.

Built once into a cache outside the checkout (``~/.cache/mountwarden/lab/<key>/``), keyed
by the kernel package's version and a hash of everything else that goes in (the package
list, the modules, the guest's files, the Python dependencies):

- ``vmlinuz``: the kernel of the ``linux-image-6.1.0-NN-amd64`` package that Debian's
  ``linux-image-amd64`` depends on (``apt-get download``);
- ``initrd.img``: a zstd cpio of a ``debootstrap --variant=minbase bookworm`` root with
  nfs-kernel-server, nfs-common, sqlite3 and python3 (plus containerd, runc and the CNI
  plugins for a real node), the kernel modules the lab loads, and ``/init``;
- ``pydeps``: a link to ``../pydeps-<hash>/``, mountwarden's runtime dependencies as CPython 3.11
  wheels for the guest (served read-only over 9p so that the agent runs inside the VM on its live
  /proc), cached apart and keyed by the pinned versions: a changed dependency installs them again
  (under a minute) without building the kernel and the root again;
- ``manifest.json``: what was built, from which package versions, in how long.

Build steps run as root (debootstrap and chroot need it); a missing host tool is an error
that names the Debian package to install (``hack/lab/host-deps.sh`` installs them all).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
KERNEL_METAPACKAGE = "linux-image-amd64"
CACHE_ENV = "MOUNTWARDEN_LAB_CACHE"
#: A built image to use as it is (the Makefile passes the output of hack/lab/build.sh).
DIR_ENV = "MOUNTWARDEN_LAB_DIR"
GUEST_PYTHON = "3.11"  # Debian 12's python3

#: Packages of the lab's root, beside debootstrap's minbase.
LAB_PACKAGES = (
    "nfs-kernel-server", "nfs-common", "rpcbind", "sqlite3", "python3", "kmod", "iproute2", "procps",
    "util-linux", "e2fsprogs",
    "libnfs-utils",  # nfs-cat: an NFS client in user space, for UserspaceNFSClient
)
#: Loaded by /init in this order (virtio_pci first: the other virtio drivers sit on its bus).
LAB_MODULES = (
    "virtio_pci", "virtio_console", "9pnet_virtio", "9p", "nfsd", "nfs", "nfsv3", "nfsv4", "veth",
)

#: What each host tool comes from, for the error that names the fix.
HOST_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "debootstrap": "debootstrap",
    "cpio": "cpio",
    "zstd": "zstd",
    "apt-get": "apt",
    "dpkg-deb": "dpkg",
}

GUEST_DIR = Path(__file__).parent / "guest"
#: Where a recipe's tools image is left in the root, for `ctr images import`.
TOOLS_ARCHIVE = "/opt/mountwarden-lab/tools.tar"

Progress = Callable[[str], None]


class LabBuildError(RuntimeError):
    """The image cannot be built; the message names the step and the fix."""


@dataclass(frozen=True)
class LabImage:
    """A built image directory."""

    dir: Path

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def python_deps(self) -> Path:
        return self.dir / "pydeps"

    @property
    def manifest(self) -> dict:
        return json.loads((self.dir / "manifest.json").read_text())

    @property
    def kernel_release(self) -> str:
        return self.manifest["kernel_release"]

    def check(self) -> None:
        missing = [p.name for p in (self.kernel, self.initrd, self.python_deps, self.dir / "manifest.json")
                   if not p.exists()]
        if missing:
            raise LabBuildError(f"{self.dir} is not a built lab image (missing {', '.join(missing)}): "
                                "run `make lab` or `mountwarden lab build`.")


def cache_dir(env: str, name: str) -> Path:
    """A build's cache: $``env``, else ~/.cache/mountwarden/``name`` (under $XDG_CACHE_HOME when set)."""
    root = os.environ.get(env)
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mountwarden" / name


def cache_root() -> Path:
    return cache_dir(CACHE_ENV, "lab")


def missing_host_tools() -> dict[str, str]:
    return {tool: package for tool, package in HOST_TOOLS.items() if shutil.which(tool) is None}


def run_step(argv: list[str], *, step: str, cwd: Path | None = None, env: dict | None = None,
             error: type[Exception] = LabBuildError) -> str:
    """One step of a build: its stdout, or ``error`` naming the step with the tail of what it said."""
    try:
        done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError as missing:
        raise error(f"{step}: {argv[0]} is not installed ({missing})") from missing
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise error(f"{step} failed (exit {done.returncode}): {' '.join(argv)}\n{tail}")
    return done.stdout



def kernel_package() -> tuple[str, str]:
    """The kernel package Debian's metapackage depends on now, and its version."""
    depends = run_step(["apt-cache", "depends", KERNEL_METAPACKAGE], step="finding the kernel package")
    match = re.search(r"Depends:\s*(linux-image-\S+-amd64)", depends)
    if match is None:
        raise LabBuildError(
            f"apt knows no {KERNEL_METAPACKAGE}: this host needs Debian 12 (bookworm) apt sources; "
            "run `apt-get update` (hack/lab/host-deps.sh does)."
        )
    package = match.group(1)
    policy = run_step(["apt-cache", "policy", package], step="finding the kernel version")
    version = re.search(r"Candidate:\s*(\S+)", policy)
    if version is None or version.group(1) == "(none)":
        raise LabBuildError(f"apt has no candidate for {package}: run `apt-get update`.")
    return package, version.group(1)


def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this host's own apt sources name for the main archive."""
    texts = []
    for path in [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]:
        if path.suffix in (".list", ".sources") and path.is_file():
            texts.append(path.read_text(errors="replace"))
    for text in texts:
        for uri in re.findall(r"(?m)^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text):
            if uri.rstrip("/").endswith("/debian") and "security" not in uri:
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def python_requirements() -> list[str]:
    """mountwarden's runtime requirements, pinned to the versions installed here."""
    pins = []
    for requirement in importlib.metadata.requires("mountwarden") or []:
        if "extra ==" in requirement:
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(requirement.split(";")[0].strip())
    return sorted(pins)


#: Bump when the build steps change what goes into an image (the inputs below are hashed anyway).
RECIPE_VERSION = 1


def _content_hash(inputs: tuple[str, ...]) -> str:
    """What goes into the image: packages, modules, /init and the recipe's version.

    The rest of the guest's code comes over 9p at run time, so changing it never rebuilds;
    the Python dependencies are cached apart (``pydeps``).
    """
    digest = hashlib.sha256(f"recipe {RECIPE_VERSION}".encode())
    for part in inputs:
        digest.update(part.encode() + b"\0")
    digest.update((GUEST_DIR / "init").read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class ImageRecipe:
    """What goes into an image: the lab, or the lab plus what a real node needs."""

    name: str
    packages: tuple[str, ...]
    modules: tuple[str, ...]
    #: The name of a container image (busybox and sqlite3 from this root) to leave at TOOLS_ARCHIVE.
    tools_image: str | None = None
    #: The environment variable naming a built image of this recipe to use as it is.
    dir_env: str = DIR_ENV

    def key(self, kernel: tuple[str, str]) -> str:
        package, version = kernel
        safe_version = re.sub(r"[^A-Za-z0-9.+-]", "_", version)
        inputs = (*self.packages, "|", *self.modules, "|", self.tools_image or "")
        return f"{self.name}_{package}_{safe_version}_{_content_hash(inputs)}"


LAB = ImageRecipe("lab", LAB_PACKAGES, LAB_MODULES)
#: The recipes `mountwarden lab build --recipe` knows (node is added by mountwarden.lab.node).
RECIPES: dict[str, ImageRecipe] = {"lab": LAB}


@contextlib.contextmanager
def build_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time: parallel sessions may all ask
        yield


def find_image(recipe: ImageRecipe = LAB) -> LabImage | None:
    """The image named by the recipe's variable ($MOUNTWARDEN_LAB_DIR), or the cached one for today's versions."""
    explicit = os.environ.get(recipe.dir_env)
    if explicit:
        image = LabImage(Path(explicit))
        image.check()
        return image
    image = LabImage(cache_root() / recipe.key(kernel_package()))
    if not (image.dir / "manifest.json").exists():
        return None
    wanted = _python_deps_dir(cache_root(), python_requirements())
    return image if image.python_deps.resolve() == wanted.resolve() and wanted.exists() else None


def build_image(recipe: ImageRecipe = LAB, *, progress: Progress = lambda _: None) -> LabImage:
    """Build the image (or find it cached) and return it."""
    missing = missing_host_tools()
    if missing:
        raise LabBuildError(
            f"the lab needs {', '.join(missing)}: apt-get install {' '.join(sorted(set(missing.values())))} "
            "(hack/lab/host-deps.sh installs them)"
        )
    kernel = kernel_package()
    requirements = python_requirements()
    root = cache_root()
    final = root / recipe.key(kernel)
    with build_lock(root):
        if (final / "manifest.json").exists():
            _link_python_deps(final, requirements, progress)
            progress(f"cached in {final}")
            return LabImage(final)
        if os.geteuid() != 0:
            raise LabBuildError("building the lab image needs root (debootstrap and chroot): run it as root, "
                                "or point $MOUNTWARDEN_LAB_DIR at an image built elsewhere")
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        _Build(recipe, kernel, partial, progress).run()
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        _link_python_deps(final, requirements, progress)
        progress(f"built {final}")
        return LabImage(final)


def _python_deps_dir(root: Path, requirements: list[str]) -> Path:
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    return root / f"pydeps-{digest}"


def _link_python_deps(image_dir: Path, requirements: list[str], progress: Progress) -> None:
    """Point the image's ``pydeps`` at the guest's Python packages for these pins, installing them if new."""
    target = _python_deps_dir(image_dir.parent, requirements)
    if not (target / ".complete").exists():
        progress("installing the guest's Python packages")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        # Wheels for the guest's CPython, whatever Python runs this build.
        run_step([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "--target", str(partial), "--only-binary=:all:", "--implementation", "cp",
              "--python-version", GUEST_PYTHON, "--platform", "manylinux_2_36_x86_64",
              "--platform", "manylinux2014_x86_64", *requirements], step="installing the guest's Python packages")
        (partial / ".complete").write_text("\n".join(requirements) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    link = image_dir / "pydeps"
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.symlink_to(f"../{target.name}")


@dataclass
class _Build:
    recipe: ImageRecipe
    kernel: tuple[str, str]
    out: Path
    progress: Progress

    @property
    def rootfs(self) -> Path:
        return self.out / "rootfs"

    def run(self) -> None:
        started = time.monotonic()
        timings: dict[str, float] = {}
        steps = (
            ("kernel", self.fetch_kernel),
            ("root", self.bootstrap_root),
            ("modules", self.install_modules),
            ("guest", self.install_guest),
            ("images", self.make_container_images),
            ("initramfs", self.pack_initramfs),
        )
        release = ""
        for name, step in steps:
            self.progress(f"{name}...")
            step_started = time.monotonic()
            result = step()
            if name == "kernel":
                release = result
            timings[name] = round(time.monotonic() - step_started, 1)
        packages = self.package_versions()
        shutil.rmtree(self.rootfs)
        shutil.rmtree(self.out / "kernel-package")
        manifest = {
            "recipe": self.recipe.name,
            "kernel_package": self.kernel[0],
            "kernel_version": self.kernel[1],
            "kernel_release": release,
            "suite": SUITE,
            "packages": packages,
            "modules": list(self.recipe.modules),
            "initrd_bytes": (self.out / "initrd.img").stat().st_size,
            "build_seconds": round(time.monotonic() - started, 1),
            "step_seconds": timings,
        }
        (self.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

    def fetch_kernel(self) -> str:
        debs = self.out / "debs"
        debs.mkdir()
        package, version = self.kernel
        run_step(["apt-get", "download", f"{package}={version}"], cwd=debs, step=f"downloading {package}")
        deb = next(debs.glob("*.deb"))
        extracted = self.out / "kernel-package"
        run_step(["dpkg-deb", "-x", str(deb), str(extracted)], step="unpacking the kernel")
        vmlinuz = next((extracted / "boot").glob("vmlinuz-*"))
        shutil.copy2(vmlinuz, self.out / "vmlinuz")
        shutil.rmtree(debs)
        return vmlinuz.name.removeprefix("vmlinuz-")

    def bootstrap_root(self) -> None:
        run_step(["debootstrap", "--variant=minbase", f"--include={','.join(self.recipe.packages)}",
              SUITE, str(self.rootfs), debian_mirror()], step="debootstrap")
        # What a VM that lives for minutes never reads: apt's lists and caches, docs, locales.
        for trimmed in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                        "usr/share/locale", "usr/share/info"):
            shutil.rmtree(self.rootfs / trimmed, ignore_errors=True)
            (self.rootfs / trimmed).mkdir(parents=True, exist_ok=True)
        # Services are started by the host's requests, never by package scripts.
        (self.rootfs / "etc/hostname").write_text("lab\n")
        (self.rootfs / "etc/hosts").write_text("127.0.0.1 localhost lab\n")

    def install_modules(self) -> None:
        release = next((self.out / "kernel-package/lib/modules").iterdir()).name
        source = self.out / "kernel-package/lib/modules" / release
        target = self.rootfs / "lib/modules" / release
        shutil.copytree(source, target)
        run_step(["chroot", str(self.rootfs), "depmod", "-a", release], step="depmod (all modules)")
        needed = module_closure(target, self.recipe.modules)
        for path in target.joinpath("kernel").rglob("*.ko*"):
            if str(path.relative_to(target)) not in needed:
                path.unlink()
        run_step(["chroot", str(self.rootfs), "depmod", "-a", release], step="depmod (the lab's modules)")
        lab_etc = self.rootfs / "etc/mountwarden-lab"
        lab_etc.mkdir(parents=True, exist_ok=True)
        (lab_etc / "modules").write_text("\n".join(self.recipe.modules) + "\n")

    def install_guest(self) -> None:
        init = self.rootfs / "init"
        shutil.copy2(GUEST_DIR / "init", init)
        init.chmod(0o755)

    def make_container_images(self) -> None:
        if self.recipe.tools_image is None:
            return
        from mountwarden.lab.oci import chroot_libraries, write_image

        applets = ("sh", "sleep", "cat", "ls", "mkdir", "rm", "echo", "true", "env", "touch", "stat", "ps")
        target = self.rootfs / TOOLS_ARCHIVE.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_image(target, self.recipe.tools_image, ["/bin/sh"],
                    [("/bin/busybox", "/bin/busybox"), ("/usr/bin/sqlite3", "/usr/bin/sqlite3")],
                    root=self.rootfs, libraries=chroot_libraries(self.rootfs),
                    symlinks=[(f"/bin/{applet}", "busybox") for applet in applets])

    def pack_initramfs(self) -> None:
        initrd = self.out / "initrd.img"
        with open(initrd, "wb") as output:
            find = subprocess.Popen(["find", ".", "-print0"], cwd=self.rootfs, stdout=subprocess.PIPE)
            cpio = subprocess.Popen(["cpio", "--null", "--quiet", "-o", "-H", "newc"], cwd=self.rootfs,
                                    stdin=find.stdout, stdout=subprocess.PIPE)
            zstd = subprocess.Popen(["zstd", "-q", "-T0", "-9"], stdin=cpio.stdout, stdout=output)
            find.stdout.close()
            cpio.stdout.close()
            codes = (zstd.wait(), cpio.wait(), find.wait())
        if any(codes):
            raise LabBuildError(f"packing the initramfs failed (zstd, cpio, find exit codes {codes})")

    def package_versions(self) -> dict[str, str]:
        listing = run_step(["chroot", str(self.rootfs), "dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                        *self.recipe.packages], step="listing package versions")
        return dict(line.split(" ", 1) for line in listing.splitlines() if " " in line)


def module_closure(modules_dir: Path, wanted: tuple[str, ...]) -> set[str]:
    """The module files (relative to ``modules_dir``, lib/modules/<release>) that ``wanted`` need.

    Dependencies come from depmod's modules.dep; a module built into the kernel needs no file.
    """
    builtin = {Path(line).name.split(".ko")[0].replace("-", "_")
               for line in (modules_dir / "modules.builtin").read_text().split()}
    depends: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        depends[path] = rest.split()
        name = Path(path).name.split(".ko")[0]
        by_name[name] = path
        by_name[name.replace("-", "_")] = path
    aliases: dict[str, str] = {}
    for line in (modules_dir / "modules.alias").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "alias":
            aliases.setdefault(parts[1], parts[2])
    needed: set[str] = set()
    pending = []
    for module in wanted:
        name = module.replace("-", "_")
        if name in builtin:
            continue
        path = by_name.get(name) or by_name.get(aliases.get(module, ""))
        if path is None:
            raise LabBuildError(f"the kernel has no module {module} (neither a module nor an alias)")
        pending.append(path)
    while pending:
        path = pending.pop()
        if path not in needed:
            needed.add(path)
            pending.extend(depends.get(path, []))
    return needed
