"""The image users install, built here: Debian packages and the runtime lock, no Docker engine, no registry.

`make image` (hack/image/build.sh) and the Dockerfile's build stage run the same `build()`, from the same
two locks, so they cannot install different things:

- ``hack/image/debian.lock``: every Debian package of the image (what ``apt-get install --no-install-recommends
  base-files python3`` installs on an empty bookworm system), each at its version with its .deb's sha256,
  written by `make image-lock` (`lock_debian()`). The .debs come from this host's apt sources
  (``apt-get download``) and are checked against those hashes; their files go into the bottom layer as the
  packages ship them (owners and modes kept), with no maintainer script run, under a merged /usr as
  bookworm installs it, and a dpkg status file naming each package for scanners (and the SBOM).
- ``requirements/runtime.txt``: mountwarden's dependencies, as CPython 3.11 manylinux wheels fetched by
  ``pip download --require-hashes`` (second layer); mountwarden itself is a wheel built from this checkout
  with the locked build backend (``requirements/build.txt``, third layer). Both are installed with PyPA's
  ``installer`` at the image's own paths, for the image's own interpreter.

Byte code is compiled at build time by the image's own python3.11 (run through the image's dynamic
loader, no chroot), checked against a hash of its source rather than a timestamp, with PYTHONHASHSEED=0,
so that the operator starts without compiling anything and the image stays byte-for-byte the same.
Every file's time is the epoch, every owner root (as the packages ship them), every list sorted: the
same inputs make the same layers, config and manifest, so the same digest.

The result is cached in ``~/.cache/mountwarden/image/<version>_<key>/`` ($MOUNTWARDEN_IMAGE_CACHE), keyed
by a hash of every input: ``image.tar`` (an OCI image layout archive, for ``ctr images import``),
``sbom.spdx.json`` (syft's SPDX document of that archive, hack/sbom) and ``manifest.json`` (digest, sizes,
package versions, timings).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import mountwarden
from mountwarden.lab import oci
from mountwarden.lab.image import build_lock, cache_dir, run_step

#: The checkout the image is built from (make image and the Dockerfile both build from one).
CHECKOUT = Path(__file__).resolve().parents[3]
DEBIAN_LOCK = CHECKOUT / "hack" / "image" / "debian.lock"
RUNTIME_LOCK = CHECKOUT / "requirements" / "runtime.txt"
BUILD_LOCK = CHECKOUT / "requirements" / "build.txt"
#: What goes into mountwarden's own wheel (the .dockerignore lets exactly these into a Docker build).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "operator")

SUITE = "bookworm"
ARCHITECTURE = "amd64"
#: What the image asks apt for; the lock holds them and everything they depend on.
ROOT_PACKAGES = ("base-files", "python3")
PYTHON = "python3.11"
#: The wheels' target: CPython 3.11 on glibc 2.36 (bookworm), x86_64.
WHEEL_PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)) + ("manylinux2014_x86_64",)
SITE_PACKAGES = f"/usr/local/lib/{PYTHON}/dist-packages"

#: The image's user: named (kopf's peer identity and getpass look the uid up), no home, no shell.
USER, UID = "mountwarden", 65532
NAME = f"mountwarden.local/mountwarden:{mountwarden.__version__}"
ENTRYPOINT = ("/usr/local/bin/mountwarden",)
CMD = ("--help",)
ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
#: Every file's modification time, and the image's creation time: the epoch, so that nothing depends on when.
EPOCH = 0
#: Bump when the build steps change what goes into an image (the inputs themselves are hashed anyway).
RECIPE_VERSION = 1

#: Paths no process in the image reads: manuals, translations, changelogs (copyright notices stay).
TRIMMED = ("usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/", "usr/share/bug/")
#: bookworm's merged /usr: these top-level directories are links into /usr.
MERGED = ("bin", "sbin", "lib", "lib64")

CACHE_ENV = "MOUNTWARDEN_IMAGE_CACHE"
#: A built image to use as it is (the Makefile passes the output of hack/image/build.sh).
DIR_ENV = "MOUNTWARDEN_IMAGE_DIR"
#: syft, for the SBOM (hack/sbom/build.sh prints its directory).
SYFT_ENV = "MOUNTWARDEN_SYFT"

Progress = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """The image cannot be built; the message names the step and the fix."""


def config(diff_ids: Sequence[str] = ()) -> dict:
    """The image configuration: what the Dockerfile's final stage says too (tests/unit/test_image.py)."""
    return {
        "architecture": ARCHITECTURE, "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {
            "User": f"{UID}:{UID}", "Env": list(ENV), "Entrypoint": list(ENTRYPOINT), "Cmd": list(CMD),
            "WorkingDir": "/",
            "Labels": {"org.opencontainers.image.title": "mountwarden",
                       "org.opencontainers.image.version": mountwarden.__version__,
                       "org.opencontainers.image.licenses": "Apache-2.0"},
        },
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"mountwarden image build: {step}"}
                    for step in ("Debian packages (hack/image/debian.lock)",
                                 "Python dependencies (requirements/runtime.txt)", "mountwarden")],
    }


# -- the Debian lock --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DebianPackage:
    name: str
    version: str
    architecture: str
    sha256: str

    def line(self) -> str:
        return f"{self.name} {self.version} {self.architecture} sha256:{self.sha256}"

    @property
    def file_name(self) -> str:
        return f"{self.name}_{re.sub(r'[^A-Za-z0-9.+~-]', '_', self.version)}_{self.architecture}.deb"


def _run(argv: Sequence[str], *, step: str, cwd: Path | None = None, env: dict | None = None) -> str:
    return run_step(list(argv), step=step, cwd=cwd, env=env, error=ImageBuildError)


def resolve_debian(roots: Sequence[str] = ROOT_PACKAGES) -> list[DebianPackage]:
    """What apt installs for ``roots`` on an empty system (an empty dpkg status), with each .deb's sha256."""
    with tempfile.TemporaryDirectory(prefix="mountwarden-image-apt-") as scratch:
        status = Path(scratch) / "status"
        status.write_text("")
        plan = _run(["apt-get", "install", "--dry-run", "--no-install-recommends", "-o", f"Dir::State::status={status}",
                     "-o", "Debug::NoLocking=1", *roots], step="resolving the image's Debian packages")
    installs = re.findall(r"^Inst (\S+) \((\S+) .*\[(\S+)\]\)", plan, flags=re.MULTILINE)
    if not installs:
        raise ImageBuildError(f"apt would install nothing for {' '.join(roots)}: are this host's apt lists those of "
                              f"Debian {SUITE}? (apt-get update)\n{plan[-2000:]}")
    packages = []
    for name, version, architecture in installs:
        shown = _run(["apt-cache", "show", f"{name}={version}"], step=f"reading {name} {version}")
        sha256 = re.search(r"^SHA256: ([0-9a-f]{64})$", shown, flags=re.MULTILINE)
        if sha256 is None:
            raise ImageBuildError(f"apt-cache show {name}={version} gives no SHA256")
        packages.append(DebianPackage(name, version, architecture, sha256.group(1)))
    return sorted(packages, key=lambda package: package.name)


LOCK_HEADER = """\
# The Debian packages of mountwarden's image: what
#   apt-get install --no-install-recommends {roots}
# installs on an empty Debian {suite} system, each at its version with the sha256 of its .deb. `make image` and the
# Dockerfile install exactly these (hack/image/build.sh, mountwarden.lab.appimage). Written by `make image-lock`:
# run it after changing the image's packages, and when Debian's archive no longer has a version named here (a point
# release or a security update replaced it).
# roots: {roots}
"""


def lock_debian(path: Path = DEBIAN_LOCK) -> list[DebianPackage]:
    packages = resolve_debian()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LOCK_HEADER.format(roots=" ".join(ROOT_PACKAGES), suite=SUITE)
                    + "".join(package.line() + "\n" for package in packages))
    return packages


def read_debian_lock(path: Path = DEBIAN_LOCK) -> tuple[tuple[str, ...], list[DebianPackage]]:
    """(the root packages the lock was made for, its packages)."""
    if not path.exists():
        raise ImageBuildError(f"{path} is missing: run `make image-lock`")
    roots: tuple[str, ...] = ()
    packages = []
    for line in path.read_text().splitlines():
        if line.startswith("# roots:"):
            roots = tuple(line.split(":", 1)[1].split())
        elif line and not line.startswith("#"):
            name, version, architecture, digest = line.split()
            packages.append(DebianPackage(name, version, architecture, digest.removeprefix("sha256:")))
    return roots, packages


# -- inputs and the cache ---------------------------------------------------------------------------------------


def cache_root() -> Path:
    return cache_dir(CACHE_ENV, "image")


def wheel_source_files() -> list[Path]:
    """The files of mountwarden's wheel, as the Docker build context has them (no caches, no build leftovers)."""
    files = []
    for name in WHEEL_SOURCES:
        path = CHECKOUT / name
        if path.is_file():
            files.append(path)
            continue
        for found in sorted(path.rglob("*")):
            relative = found.relative_to(CHECKOUT).parts
            if found.is_file() and "__pycache__" not in relative and not any(
                    part.endswith(".egg-info") for part in relative):
                files.append(found)
    return files


def key_inputs() -> list[Path]:
    """Every file whose bytes make the image: the locks, the build's own code, the wheel's sources."""
    return [DEBIAN_LOCK, RUNTIME_LOCK, BUILD_LOCK, Path(__file__), Path(oci.__file__), *wheel_source_files()]


def input_key() -> str:
    """A hash of everything that goes into the image (key_inputs, and this recipe's version)."""
    digest = hashlib.sha256(f"recipe {RECIPE_VERSION}\n".encode())
    for path in key_inputs():
        digest.update(str(path.relative_to(CHECKOUT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class BuiltImage:
    """A built image's directory."""

    dir: Path

    @property
    def archive(self) -> Path:
        return self.dir / "image.tar"

    @property
    def sbom(self) -> Path:
        return self.dir / "sbom.spdx.json"

    @property
    def manifest(self) -> dict:
        return json.loads((self.dir / "manifest.json").read_text())

    @property
    def digest(self) -> str:
        return self.manifest["digest"]

    @property
    def name(self) -> str:
        return self.manifest["name"]

    def check(self) -> None:
        missing = [p.name for p in (self.archive, self.dir / "manifest.json") if not p.exists()]
        if missing:
            raise ImageBuildError(f"{self.dir} is not a built image (missing {', '.join(missing)}): run `make image`")


def find_image() -> BuiltImage | None:
    """The image named by $MOUNTWARDEN_IMAGE_DIR, or the cached one for this checkout's inputs."""
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        image = BuiltImage(Path(explicit))
        image.check()
        return image
    image = BuiltImage(cache_root() / f"mountwarden-{mountwarden.__version__}_{input_key()}")
    return image if (image.dir / "manifest.json").exists() else None


def build_image(*, syft: Path | None = None, progress: Progress = lambda _: None, root: Path | None = None,
                downloads: Path | None = None) -> BuiltImage:
    """Build the image (or find it cached) with its SBOM beside it, and return it.

    ``root`` is the cache (cache_root()); ``downloads``, where the .debs are kept (under the cache).
    """
    root = root or cache_root()
    final = root / f"mountwarden-{mountwarden.__version__}_{input_key()}"
    with build_lock(root):
        if not (final / "manifest.json").exists():
            partial = final.with_name(final.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            _Build(partial, downloads or root / "downloads", progress).run()
            shutil.rmtree(final, ignore_errors=True)
            partial.rename(final)
            progress(f"built {final}")
        else:
            progress(f"cached in {final}")
        image = BuiltImage(final)
        if syft is not None and not image.sbom.exists():
            write_sbom(image, syft, progress)
        return image


def write_sbom(image: BuiltImage, syft: Path, progress: Progress) -> Path:
    """syft's SPDX document of the image archive, beside it."""
    progress("writing the SBOM (syft)")
    partial = image.sbom.with_suffix(".partial")
    # No update check, no network: syft reads the archive and nothing else.
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    _run([str(syft), "scan", f"oci-archive:{image.archive}", "--quiet", "-o", f"spdx-json={partial}"],
         step="writing the SBOM", env=env)
    partial.rename(image.sbom)
    return image.sbom


def build_rootfs(target: Path, progress: Progress = lambda _: None) -> Path:
    """The Dockerfile's build stage: the same layers as `make image`, unpacked into ``target`` in order."""
    with tempfile.TemporaryDirectory(prefix="mountwarden-image-") as scratch:
        build = _Build(Path(scratch) / "out", Path(scratch) / "downloads", progress)
        build.out.mkdir(parents=True)
        layers = build.layers()
        target.mkdir(parents=True, exist_ok=True)
        for layer in layers:
            with tarfile.open(layer) as archive:
                archive.extractall(target, filter="fully_trusted")  # our own layers: keep owners and modes
    return target


# -- the build --------------------------------------------------------------------------------------------------


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = EPOCH
    info.uname = info.gname = ""
    info.pax_headers = {}
    return info


def _usr_merged(name: str) -> str:
    """A package's path under bookworm's merged /usr ("./bin/sh" is /usr/bin/sh)."""
    path = str(PurePosixPath("/", name)).lstrip("/")
    top, _, rest = path.partition("/")
    return f"usr/{top}/{rest}".rstrip("/") if top in MERGED else path


def _trimmed(path: str) -> bool:
    if path.startswith("usr/share/doc/"):
        return not (path.endswith("/copyright") or path.count("/") <= 3)
    return any(path.startswith(prefix) for prefix in TRIMMED)


class _Layer:
    """One layer's entries by path: written sorted, with fixed times and owners, so always the same bytes."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging  # the same files on disk, for the image's python to run from and compile
        staging.mkdir(parents=True, exist_ok=True)
        self.entries: dict[str, tarfile.TarInfo] = {}

    def add_directory(self, path: str, mode: int = 0o755) -> None:
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            parent = "/".join(parts[:depth])
            if parent and parent not in self.entries:
                info = tarfile.TarInfo(parent)
                info.type, info.mode = tarfile.DIRTYPE, mode if depth == len(parts) else 0o755
                self.entries[parent] = _normalized(info)
                (self.staging / parent).mkdir(parents=True, exist_ok=True)

    def add(self, info: tarfile.TarInfo, data: bytes | None, owner: str) -> None:
        path = info.name
        if "/" in path:
            self.add_directory(path.rsplit("/", 1)[0])
        existing = self.entries.get(path)
        if existing is not None:
            if existing.isdir() and info.isdir():
                return
            same = (existing.type, existing.linkname) == (info.type, info.linkname) and (
                not info.isreg() or (self.staging / path).read_bytes() == data)
            if not same:
                raise ImageBuildError(f"{owner} ships /{path}, which another package ships differently")
            return
        self.entries[path] = _normalized(info)
        target = self.staging / path
        if info.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif info.issym():
            target.symlink_to(info.linkname)
        elif info.islnk():
            os.link(self.staging / info.linkname, target)
        elif info.isreg():
            target.write_bytes(data or b"")
            target.chmod(info.mode & 0o777 | 0o200)

    def add_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(path)
        info.size, info.mode = len(data), mode
        self.add(info, data, "mountwarden")

    def take_tree(self, image_dir: str) -> None:
        """Every file under ``image_dir`` in the staging tree (what an installer or the compiler put there)."""
        base = self.staging / image_dir.lstrip("/")
        for found in sorted(base.rglob("*")):
            path = str(found.relative_to(self.staging))
            if path in self.entries:
                continue
            if found.is_symlink():
                info = tarfile.TarInfo(path)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(found)
                self.entries[path] = _normalized(info)
            elif found.is_dir():
                self.add_directory(path)
            else:
                info = tarfile.TarInfo(path)
                info.size = found.stat().st_size
                info.mode = 0o755 if os.access(found, os.X_OK) else 0o644
                self.entries[path] = _normalized(info)

    def write(self, output: Path) -> Path:
        with tarfile.open(output, "w", format=tarfile.PAX_FORMAT) as archive:
            for path in sorted(self.entries):
                info = self.entries[path]
                if info.isreg():
                    with open(self.staging / path, "rb") as handle:
                        archive.addfile(info, handle)
                else:
                    archive.addfile(info)
        return output


@dataclass
class _Build:
    out: Path
    downloads: Path
    progress: Progress
    timings: dict[str, float] = field(default_factory=dict)

    def run(self) -> None:
        started = time.monotonic()
        layers = self.layers()
        step = time.monotonic()
        written = oci.write_archive(self.out / "image.tar", NAME, layers, config())
        self.timings["archive"] = round(time.monotonic() - step, 1)
        sizes = [layer.stat().st_size for layer in layers]
        manifest = {
            "name": NAME,
            "digest": written.manifest_digest,
            "config_digest": written.config_digest,
            "layers": [{"digest": digest, "bytes": size, "gzip_bytes": _gzip_size(layer)}
                       for digest, size, layer in zip(written.layer_digests, sizes, layers, strict=True)],
            "bytes": sum(sizes),
            "debian": {package.name: package.version for package in self.debian},
            "python": self.python_versions,
            "build_seconds": round(time.monotonic() - started, 1),
            "step_seconds": self.timings,
        }
        manifest["gzip_bytes"] = sum(layer["gzip_bytes"] for layer in manifest["layers"])
        for layer in layers:
            layer.unlink()
        shutil.rmtree(self.out / "staging", ignore_errors=True)
        (self.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

    def timed(self, name: str, step: Callable[[], Path]) -> Path:
        self.progress(f"{name}...")
        started = time.monotonic()
        result = step()
        self.timings[name] = round(time.monotonic() - started, 1)
        return result

    def layers(self) -> list[Path]:
        """The three layers, bottom first: Debian, the Python dependencies, mountwarden."""
        self.staging = self.out / "staging"
        roots, self.debian = read_debian_lock()
        if roots != ROOT_PACKAGES:
            raise ImageBuildError(f"{DEBIAN_LOCK} was made for {' '.join(roots)}, the image asks for "
                                  f"{' '.join(ROOT_PACKAGES)}: run `make image-lock`")
        return [
            self.timed("debian", self.debian_layer),
            self.timed("python dependencies", self.dependencies_layer),
            self.timed("mountwarden", self.mountwarden_layer),
        ]

    # -- layer 1: Debian -------------------------------------------------------------------------------

    def debs(self) -> list[Path]:
        """The locked .debs, downloaded once into the cache and checked against the lock's hashes."""
        self.downloads.mkdir(parents=True, exist_ok=True)
        missing = [package for package in self.debian if not (self.downloads / package.file_name).exists()]
        if missing:
            with tempfile.TemporaryDirectory(prefix="download-", dir=self.downloads) as scratch:
                try:
                    _run(["apt-get", "download", *(f"{p.name}={p.version}" for p in missing)], cwd=Path(scratch),
                         step="downloading the image's Debian packages")
                except ImageBuildError as error:
                    raise ImageBuildError(f"{error}\nA version in {DEBIAN_LOCK.name} that apt cannot find has left "
                                          "Debian's archive (or apt's lists are stale: apt-get update): run "
                                          "`make image-lock`") from None
                for package in missing:
                    found = list(Path(scratch).glob(f"{package.name}_*.deb"))
                    if len(found) != 1:
                        raise ImageBuildError(f"apt-get download left {found} for {package.name}")
                    self._check_hash(found[0], package)
                    found[0].rename(self.downloads / package.file_name)
        paths = []
        for package in self.debian:
            path = self.downloads / package.file_name
            self._check_hash(path, package)
            paths.append(path)
        return paths

    @staticmethod
    def _check_hash(path: Path, package: DebianPackage) -> None:
        actual = oci.file_digest(path)
        if actual != package.sha256:
            path.unlink()
            raise ImageBuildError(f"{package.name} {package.version}: the .deb's sha256 is {actual}, the lock says "
                                  f"{package.sha256}")

    def debian_layer(self) -> Path:
        layer = _Layer(self.staging / "debian")
        for top in MERGED:
            link = tarfile.TarInfo(top)
            link.type, link.linkname = tarfile.SYMTYPE, f"usr/{top}"
            layer.add(link, None, "bookworm's merged /usr")
        status = []
        for package, deb in zip(self.debian, self.debs(), strict=True):
            fields = _run(["dpkg-deb", "--field", str(deb)], step=f"reading {deb.name}").rstrip("\n")
            status.append(_status_paragraph(fields))
            for member, data in _deb_files(deb):
                path = _usr_merged(member.name)
                if not path or _trimmed(path):
                    continue
                member.name = path
                if member.islnk():
                    member.linkname = _usr_merged(member.linkname)
                layer.add(member, data, f"{package.name} {package.version}")
        layer.add_file("var/lib/dpkg/status", "\n".join(status).encode() + b"\n")
        layer.add_file("etc/passwd", (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                      f"{USER}:x:{UID}:{UID}:{USER}:/nonexistent:/usr/sbin/nologin\n"
                                      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n").encode())
        layer.add_file("etc/group", f"root:x:0:\n{USER}:x:{UID}:\nnogroup:x:65534:\n".encode())
        layer.add_file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
        layer.add_directory("tmp", 0o1777)
        self.python = _ImagePython(layer.staging)
        self.python.compile(layer.staging, f"usr/lib/{PYTHON}")
        layer.take_tree(f"usr/lib/{PYTHON}")
        return layer.write(self.out / "debian.tar")

    # -- layer 2: the Python dependencies --------------------------------------------------------------

    def wheels(self, wheels: Path) -> list[Path]:
        """The runtime lock's wheels for the image's CPython, hash-checked by pip (pip's own cache keeps them)."""
        platforms = [arg for platform in WHEEL_PLATFORMS for arg in ("--platform", platform)]
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
              "--require-hashes", "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
              "--abi", "cp311", *platforms, "--dest", str(wheels), "-r", str(RUNTIME_LOCK)],
             step="downloading the runtime lock's wheels")
        pinned = _pins(RUNTIME_LOCK)
        chosen = []
        for name, version in sorted(pinned.items()):
            found = [w for w in wheels.glob("*.whl") if _wheel_name(w) == (name, version)]
            if len(found) > 1:
                raise ImageBuildError(f"pip downloaded {len(found)} wheels of {name} {version}: {found}")
            chosen.extend(found)  # none: a pin whose marker leaves Linux out (colorama: Windows only)
        return chosen

    def dependencies_layer(self) -> Path:
        layer = _Layer(self.staging / "dependencies")
        self.python_versions = {}
        with tempfile.TemporaryDirectory(prefix="wheels-", dir=self.out) as wheels:
            for wheel in self.wheels(Path(wheels)):
                name, version = _wheel_name(wheel)
                self.python_versions[name] = version
                _install_wheel(wheel, layer.staging)
        self.python.compile(layer.staging, SITE_PACKAGES)
        layer.take_tree("usr/local")
        return layer.write(self.out / "dependencies.tar")

    # -- layer 3: mountwarden --------------------------------------------------------------------------

    def mountwarden_layer(self) -> Path:
        _check_build_backend()
        layer = _Layer(self.staging / "mountwarden")
        with tempfile.TemporaryDirectory(prefix="mountwarden-wheel-") as scratch:
            source = Path(scratch) / "src"
            for path in wheel_source_files():
                target = source / path.relative_to(CHECKOUT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
            _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                  "--no-build-isolation", "--wheel-dir", str(Path(scratch) / "dist"), str(source)],
                 step="building mountwarden's wheel")
            (wheel,) = (Path(scratch) / "dist").glob("mountwarden-*.whl")
            self.python_versions["mountwarden"] = _wheel_name(wheel)[1]
            _install_wheel(wheel, layer.staging)
        self.python.compile(layer.staging, SITE_PACKAGES)
        layer.take_tree("usr/local")
        return layer.write(self.out / "mountwarden.tar")


def _deb_files(deb: Path) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    """The files a .deb installs (its data.tar, as dpkg-deb reads it), each with its contents."""
    unpack = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    with unpack, tarfile.open(fileobj=unpack.stdout, mode="r|") as archive:
        for member in archive:
            yield member, archive.extractfile(member).read() if member.isreg() else None
    if unpack.returncode:
        raise ImageBuildError(f"dpkg-deb --fsys-tarfile {deb.name} exited {unpack.returncode}")


def _status_paragraph(fields: str) -> str:
    """A package's control fields as dpkg's status file has them: installed, right after its name."""
    package, *rest = fields.splitlines()
    return "\n".join([package, "Status: install ok installed", *rest]) + "\n"


def _pins(lock: Path) -> dict[str, str]:
    """name -> version of a requirements file, names normalized as in wheel file names."""
    return {_normal(name): version for name, version in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", lock.read_text(),
                                                                     flags=re.MULTILINE)}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheel_name(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    return _normal(name), version


def _check_build_backend() -> None:
    """The wheel is built with this venv's setuptools and wheel: they must be the ones build.txt locks."""
    from importlib.metadata import version

    for name, pinned in _pins(BUILD_LOCK).items():
        if name in ("setuptools", "wheel") and version(name) != pinned:
            raise ImageBuildError(f"{name} {version(name)} is installed, requirements/build.txt locks {pinned}: "
                                  "run `make venv`")


def _install_wheel(wheel: Path, root: Path) -> None:
    """Install one wheel at the image's paths (under ``root``), its scripts for the image's /usr/bin/python3."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    name = _wheel_name(wheel)[0]
    scheme = {"purelib": SITE_PACKAGES, "platlib": SITE_PACKAGES, "scripts": "/usr/local/bin", "data": "/usr/local",
              "headers": f"/usr/local/include/{PYTHON}/{name}"}
    destination = SchemeDictionaryDestination(scheme, interpreter="/usr/bin/python3", script_kind="posix",
                                              bytecode_optimization_levels=(), destdir=str(root))
    with WheelFile.open(wheel) as source:
        install(source, destination, additional_metadata={"INSTALLER": b"mountwarden-image\n"})


class _ImagePython:
    """The image's own python3.11, run from the staging tree through the image's dynamic loader."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.argv = [str(root / "usr/lib64/ld-linux-x86-64.so.2"), "--library-path",
                     f"{root}/usr/lib/x86_64-linux-gnu", str(root / "usr/bin" / PYTHON)]

    def compile(self, tree: Path, image_dir: str) -> None:
        """Byte code for every module under ``image_dir`` of ``tree`` (a layer's staging root), as the image
        will find it: named by its path in the image, checked against its source's hash."""
        target = tree / image_dir.lstrip("/")
        env = {"PYTHONHOME": str(self.root / "usr"), "PYTHONHASHSEED": "0", "SOURCE_DATE_EPOCH": "0",
               "PATH": "/usr/bin:/bin"}
        # -B: the modules compileall imports itself must not leave timestamped byte code behind, which it
        # would then keep (-f recompiles anything found anyway).
        _run([*self.argv, "-I", "-B", "-m", "compileall", "-q", "-f", "-j", "1", "--invalidation-mode",
              "checked-hash", "-s", str(tree), "-p", "/", str(target)],
             step=f"compiling {image_dir}", env=env)


def _gzip_size(layer: Path) -> int:
    """What the layer weighs gzipped (level 6), as a registry would store it."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    size = 0
    with open(layer, "rb") as handle:
        while chunk := handle.read(1 << 20):
            size += len(compressor.compress(chunk))
    return size + len(compressor.flush())

