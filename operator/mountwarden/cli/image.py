"""Subcommands: image build | lock (the image users install, built here without Docker or a registry)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, progress
from mountwarden.lab import appimage

image_app = typer.Typer(
    help=("mountwarden's image, built from Debian packages and the runtime lock (hack/image/debian.lock, "
          "requirements/runtime.txt) without a Docker engine or a registry: the same inputs make the same digest."),
    no_args_is_help=True,
)
app.add_typer(image_app, name="image")


_progress = progress("image")


@image_app.command("build")
def build_command(
    print_dir: Annotated[bool, typer.Option("--print-dir", help="Print only the image's directory on stdout.")]
    = False,
    rootfs: Annotated[Path | None, typer.Option(
        "--rootfs", help="Unpack the image's layers into this directory instead (the Dockerfile's build stage).")]
    = None,
    syft: Annotated[Path | None, typer.Option(
        "--syft", envvar=appimage.SYFT_ENV, help="syft, to write the SBOM beside the image (hack/sbom/build.sh).")]
    = None,
) -> None:
    """Build the image into ~/.cache/mountwarden/image/<version>_<key>/ ($MOUNTWARDEN_IMAGE_CACHE), or find it
    cached: image.tar (an OCI image layout archive), sbom.spdx.json, manifest.json (digest, sizes, versions)."""
    try:
        if rootfs is not None:
            appimage.build_rootfs(rootfs, progress=_progress)
            return
        image = appimage.build_image(syft=syft, progress=_progress)
    except appimage.ImageBuildError as error:
        fail(escape(str(error)))
    if print_dir:
        print(image.dir)
        return
    manifest = image.manifest
    console.print(f"{image.name}@{manifest['digest']}\n{image.archive}\n"
                  f"{manifest['bytes'] / 2**20:.0f} MiB in {len(manifest['layers'])} layers "
                  f"({manifest['gzip_bytes'] / 2**20:.0f} MiB gzipped), built in {manifest['build_seconds']:.0f} s"
                  + (f"\nSBOM: {image.sbom}" if image.sbom.exists() else ""))


@image_app.command("lock")
def lock_command() -> None:
    """Resolve the image's Debian packages with this host's apt into hack/image/debian.lock (versions, hashes)."""
    try:
        packages = appimage.lock_debian()
    except appimage.ImageBuildError as error:
        fail(escape(str(error)))
    console.print(f"{os.path.relpath(appimage.DEBIAN_LOCK)}: {len(packages)} packages")
