"""OCI image archives made from files, for `ctr images import` on the real node (no registry, no network).

The real node's pause image is the pause binary of hack/nodebin; its tools image (busybox and
sqlite3, with the shared libraries they need) is made from the node image's own Debian root
while that image is built; mountwarden's own image (mountwarden.lab.appimage) is written here too.
Layers are uncompressed tars: the VM under TCG would spend minutes decompressing what it can read
as it is.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Shared libraries a file needs, as paths inside the root it comes from.
Libraries = Callable[[str], list[str]]


def chroot_libraries(root: Path) -> Libraries:
    """ldd run inside ``root`` (a debootstrap tree): the libraries as that root has them."""

    def libraries(path: str) -> list[str]:
        listed = subprocess.run(["chroot", str(root), "ldd", path], capture_output=True, text=True,
                                check=False).stdout
        return sorted(set(re.findall(r"(/\S+\.so[^\s]*)", listed)))

    return libraries


def _layer(root: Path, entries: Iterable[tuple[str, str]], libraries: Libraries,
           symlinks: Sequence[tuple[str, str]]) -> bytes:
    buffer = io.BytesIO()
    added: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:

        def add(source: str, target: str) -> None:
            target = target.lstrip("/")
            parts = target.split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in added:
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    archive.addfile(info)
                    added.add(directory)
            if target in added:
                return
            added.add(target)
            path = root / source.lstrip("/")
            info = archive.gettarinfo(str(path), arcname=target)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with open(path, "rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
            if info.issym():  # the link's target too, so that it resolves inside the image
                pointed = os.path.normpath(os.path.join(os.path.dirname("/" + source.lstrip("/")), info.linkname))
                add(pointed, pointed)

        for source, target in entries:
            add(source, target)
            if (root / source.lstrip("/")).is_file():
                for library in libraries(source):
                    add(library, library)
        for link, target in symlinks:
            if link.lstrip("/") not in added:
                info = tarfile.TarInfo(link.lstrip("/"))
                info.type, info.linkname = tarfile.SYMTYPE, target
                archive.addfile(info)
                added.add(link.lstrip("/"))
    return buffer.getvalue()


def _blob(archive: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))
    return digest


def _file_blob(archive: tarfile.TarFile, path: Path) -> str:
    """A blob from a file, read twice (its digest, then its bytes) rather than held in memory."""
    digest = file_digest(path)
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = path.stat().st_size
    with open(path, "rb") as handle:
        archive.addfile(info, handle)
    return digest


def file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _json_entry(archive: tarfile.TarFile, name: str, document: dict) -> None:
    data = json.dumps(document).encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


@dataclass(frozen=True)
class WrittenImage:
    """What identifies an image written by write_archive: its manifest's digest (what a registry and
    containerd call the image's digest) and its config's (the image ID)."""

    manifest_digest: str
    config_digest: str
    layer_digests: tuple[str, ...]


def _canonical(document: dict) -> bytes:
    """JSON with sorted keys and no spaces: the same document is always the same bytes, so the same digest."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_archive(output: Path, name: str, layers: Sequence[Path | bytes], config: dict) -> WrittenImage:
    """Write an OCI image layout archive (`ctr images import`) of uncompressed ``layers``, bottom first.

    ``config`` is the image configuration (architecture, os, config, history...); its rootfs is filled in
    here from the layers. Blobs are written in a fixed order with fixed metadata: the same layers and config
    always make the same archive, byte for byte.
    """
    with tarfile.open(output, "w", format=tarfile.PAX_FORMAT) as archive:
        layer_digests = tuple(_blob(archive, layer) if isinstance(layer, bytes) else _file_blob(archive, layer)
                              for layer in layers)
        sizes = [len(layer) if isinstance(layer, bytes) else layer.stat().st_size for layer in layers]
        config_bytes = _canonical({**config, "rootfs": {
            "type": "layers", "diff_ids": [f"sha256:{digest}" for digest in layer_digests]}})
        config_digest = _blob(archive, config_bytes)
        manifest = _canonical({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": f"sha256:{config_digest}", "size": len(config_bytes)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{digest}",
                        "size": size} for digest, size in zip(layer_digests, sizes, strict=True)],
        })
        manifest_digest = _blob(archive, manifest)
        _json_entry(archive, "index.json", {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{manifest_digest}",
            "size": len(manifest), "platform": {"architecture": config["architecture"], "os": config["os"]},
            # containerd names the imported image after this annotation.
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
        }]})
        _json_entry(archive, "oci-layout", {"imageLayoutVersion": "1.0.0"})
    return WrittenImage(f"sha256:{manifest_digest}", f"sha256:{config_digest}",
                        tuple(f"sha256:{digest}" for digest in layer_digests))


def write_image(output: Path, name: str, entrypoint: Sequence[str], files: Sequence[tuple[str, str]], *,
                root: Path = Path("/"), libraries: Libraries = lambda _: [],
                symlinks: Sequence[tuple[str, str]] = ()) -> Path:
    """Write an OCI image layout archive of one layer holding ``files`` ((path in root, path in image)).

    ``symlinks`` adds (link, target) pairs, e.g. busybox's applets.
    """
    layer = _layer(root, files, libraries, symlinks)
    write_archive(output, name, [layer], {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Env": ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"]},
    })
    return output
