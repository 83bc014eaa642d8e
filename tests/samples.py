"""Where the real procfs samples are: copies of the permissively licensed ones in tests/fixtures/procfs,
the whole shared set (GPL ones included, never copied here) beside the repository."""

import os
from pathlib import Path

import pytest

LOCAL_SAMPLES = Path(__file__).resolve().parent / "fixtures" / "procfs"


def shared_samples_dir() -> Path:
    """../shared/fixtures/procfs beside the repository, or $MOUNTWARDEN_SHARED_FIXTURES/procfs."""
    root = os.environ.get("MOUNTWARDEN_SHARED_FIXTURES")
    return (Path(root) if root else Path(__file__).resolve().parents[1].parent / "shared" / "fixtures") / "procfs"


def shared_sample_path(name: str) -> Path:
    """A sample of the shared set; a test that needs one fails, never skips, when the set is absent."""
    directory = shared_samples_dir()
    if not directory.is_dir():
        pytest.fail(f"the shared procfs samples are not at {directory}: check out the shared fixtures beside the "
                    "repository (../shared/fixtures/procfs), or point MOUNTWARDEN_SHARED_FIXTURES at their parent")
    return directory / name


def shared_sample(name: str) -> str:
    return shared_sample_path(name).read_text(encoding="utf-8")


def sample_path(name: str) -> Path:
    """A sample by file name: the repository's copy when there is one, else the shared set's."""
    local = LOCAL_SAMPLES / name
    return local if local.is_file() else shared_sample_path(name)
