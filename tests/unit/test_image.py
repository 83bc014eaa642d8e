"""The image's inputs: the Debian lock is the one the build asks apt for, and the cache key covers every input.

Read, no network. The Dockerfile's hold to the same build is tests/unit/test_dockerfile.py; building the image twice
to the same digest, tests/integration/test_image_build.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from mountwarden.lab import appimage

ROOT = Path(__file__).resolve().parents[2]


def test_the_debian_lock_is_made_for_the_packages_the_image_asks_for():
    roots, packages = appimage.read_debian_lock()
    assert roots == appimage.ROOT_PACKAGES, "hack/image/debian.lock is stale: run `make image-lock`"
    names = [package.name for package in packages]
    assert names == sorted(set(names)), "one version per package, sorted"
    assert set(roots) <= set(names)
    assert {"python3.11", "libc6", "libssl3"} <= set(names)
    for package in packages:
        assert re.fullmatch(r"[0-9a-f]{64}", package.sha256), package
        assert package.architecture in ("amd64", "all"), package


def test_the_image_key_covers_every_input():
    """A change to a lock, the build's code or a source file of the wheel makes a new image; nothing else does."""
    inputs = {str(path.relative_to(ROOT)) for path in appimage.key_inputs()}
    assert {"hack/image/debian.lock", "requirements/runtime.txt", "requirements/build.txt",
            "operator/mountwarden/lab/appimage.py", "operator/mountwarden/lab/oci.py", "pyproject.toml", "README.md",
            "LICENSE", "operator/mountwarden/cli/__init__.py"} <= inputs
    assert not [path for path in inputs if "__pycache__" in path or ".egg-info" in path]
    assert appimage.input_key() == appimage.input_key()
