"""mountwarden's image, as `make image` builds it: the OCI archive, its manifest and its SBOM.

$MOUNTWARDEN_IMAGE_DIR (what `make test` passes) names it; without it, hack/image/build.sh builds it (or finds
it cached for this checkout's inputs). An image that cannot be built fails the tests that need it, with the
build's own words; it never skips them.
"""

from __future__ import annotations

import subprocess

import pytest
from tests.support import ROOT

from mountwarden.lab.appimage import BuiltImage, ImageBuildError, find_image


@pytest.fixture(scope="session")
def mountwarden_image() -> BuiltImage:
    try:
        image = find_image()
    except ImageBuildError as error:
        pytest.fail(f"the image in $MOUNTWARDEN_IMAGE_DIR is not usable: {error}", pytrace=False)
    if image is not None and image.sbom.exists():
        return image
    built = subprocess.run([str(ROOT / "hack/image/build.sh")], capture_output=True, text=True, timeout=3600)
    if built.returncode != 0:
        pytest.fail(f"hack/image/build.sh failed (exit {built.returncode}):\n{built.stderr[-4000:]}", pytrace=False)
    image = BuiltImage(ROOT.joinpath(built.stdout.strip().splitlines()[-1]))
    image.check()
    return image
