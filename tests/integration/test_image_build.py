"""mountwarden's image, built here without Docker or a registry: the same inputs make the same digest, it holds
exactly the locked packages, and its SBOM (syft, SPDX) names every one of them.

The image under test is the one `make test` built (hack/image/build.sh); these tests build it a second time from
nothing but the same inputs (the .debs already downloaded are reused: their sha256 is checked against the lock
either way) and read both back.
"""

from __future__ import annotations

import json
import re
import tarfile

import pytest
from packaging.requirements import Requirement

from mountwarden.lab import appimage


def image_files(image: appimage.BuiltImage) -> tuple[dict, list[tarfile.TarInfo]]:
    """The image's configuration and every entry of its layers, bottom first."""
    with tarfile.open(image.archive) as archive:
        (entry,) = json.load(archive.extractfile("index.json"))["manifests"]
        manifest = json.load(archive.extractfile(f"blobs/sha256/{entry['digest'].split(':')[1]}"))
        config = json.load(archive.extractfile(f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"))
        entries = []
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=archive.extractfile(f"blobs/sha256/{layer['digest'].split(':')[1]}")) as tar:
                entries.extend(tar.getmembers())
    assert entry["digest"] == image.digest
    return config, entries


def linux_pins() -> dict[str, str]:
    """The runtime lock's pins that apply in the image (CPython 3.11 on Linux), by normalized name."""
    environment = {"sys_platform": "linux", "platform_python_implementation": "CPython",
                   "implementation_name": "cpython", "python_version": "3.11", "python_full_version": "3.11.2"}
    pins = {}
    for line in appimage.RUNTIME_LOCK.read_text().splitlines():
        if re.match(r"^[A-Za-z0-9._-]+==", line):
            requirement = Requirement(line.rstrip(" \\"))
            if requirement.marker is None or requirement.marker.evaluate(environment):
                (spec,) = requirement.specifier
                pins[appimage._normal(requirement.name)] = spec.version
    return pins


def byte_code(source: str) -> str:
    directory, name = source.rsplit("/", 1)
    return f"{directory}/__pycache__/{name.removesuffix('.py')}.cpython-311.pyc"


@pytest.fixture(scope="module")
def rebuilt(mountwarden_image, tmp_path_factory) -> appimage.BuiltImage:
    return appimage.build_image(root=tmp_path_factory.mktemp("image-cache"),
                                downloads=mountwarden_image.dir.parent / "downloads")


def test_the_same_inputs_make_the_same_digest(mountwarden_image, rebuilt):
    first, second = mountwarden_image.manifest, rebuilt.manifest
    assert [layer["digest"] for layer in second["layers"]] == [layer["digest"] for layer in first["layers"]]
    assert second["config_digest"] == first["config_digest"]
    assert rebuilt.digest == mountwarden_image.digest
    assert rebuilt.archive.read_bytes() == mountwarden_image.archive.read_bytes()


def test_the_image_holds_exactly_the_locked_packages(mountwarden_image):
    _, locked = appimage.read_debian_lock()
    manifest = mountwarden_image.manifest
    assert manifest["debian"] == {package.name: package.version for package in locked}
    pins = linux_pins()
    assert {name: version for name, version in manifest["python"].items() if name != "mountwarden"} == pins
    config, entries = image_files(mountwarden_image)
    names = {entry.name for entry in entries}
    # Every wheel installed once, at its locked version, and nothing else in site-packages.
    installed = {re.sub(r"-[^-]+\.dist-info$", "", name.rsplit("/", 1)[-1]).lower(): name
                 for name in names if re.fullmatch(rf"{appimage.SITE_PACKAGES[1:]}/[^/]+\.dist-info", name)}
    assert {appimage._normal(name) for name in installed} == set(pins) | {"mountwarden"}
    # dpkg's own record of the Debian packages, which scanners read.
    status = next(entry for entry in entries if entry.name == "var/lib/dpkg/status")
    assert status.isreg()
    assert config["config"]["Entrypoint"] == list(appimage.ENTRYPOINT)


def test_the_image_runs_as_a_named_non_root_user_and_compiles_nothing_at_start(mountwarden_image):
    config, entries = image_files(mountwarden_image)
    assert config["config"]["User"] == f"{appimage.UID}:{appimage.UID}"
    with tarfile.open(mountwarden_image.archive) as archive:
        manifest = json.load(archive.extractfile("blobs/sha256/" + mountwarden_image.digest.split(":")[1]))
        bottom = manifest["layers"][0]["digest"].split(":")[1]
        with tarfile.open(fileobj=archive.extractfile(f"blobs/sha256/{bottom}")) as tar:
            passwd = tar.extractfile("etc/passwd").read().decode()
    assert f"{appimage.USER}:x:{appimage.UID}:{appimage.UID}:" in passwd
    # Owners as the packages ship them: root, nothing owned by the image's user (it may write nothing).
    assert not [entry.name for entry in entries if entry.uid == appimage.UID]
    assert {entry.mtime for entry in entries} == {appimage.EPOCH}
    # Byte code for every module of the stdlib, the dependencies and mountwarden: a read-only root costs no start.
    sources = {entry.name for entry in entries if entry.name.endswith(".py") and "/python3" in entry.name}
    compiled = {entry.name for entry in entries if entry.name.endswith(".cpython-311.pyc")}
    uncompiled = [source for source in sources if byte_code(source) not in compiled]
    assert len(uncompiled) < len(sources) / 100, uncompiled[:20]


def test_the_sbom_names_every_package_at_its_locked_version(mountwarden_image):
    sbom = json.loads(mountwarden_image.sbom.read_text())
    assert sbom["spdxVersion"] == "SPDX-2.3"
    assert any(creator.startswith("Tool: syft-") for creator in sbom["creationInfo"]["creators"])
    by_kind: dict[str, dict[str, str]] = {"deb": {}, "pypi": {}}
    for package in sbom["packages"]:
        for ref in package.get("externalRefs", []):
            match = re.match(r"pkg:(deb|pypi)/(?:debian/)?([^@]+)@", ref["referenceLocator"])
            if ref["referenceType"] == "purl" and match:
                by_kind[match[1]][appimage._normal(match[2])] = package["versionInfo"]
    manifest = mountwarden_image.manifest
    assert by_kind["deb"] == {appimage._normal(name): version for name, version in manifest["debian"].items()}
    assert by_kind["pypi"] == manifest["python"]
