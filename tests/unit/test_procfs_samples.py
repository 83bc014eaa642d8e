"""Every shared procfs sample parses, and the copies kept in this repository match their originals."""

from pathlib import Path

import pytest
from tests.samples import LOCAL_SAMPLES, shared_samples_dir

from mountwarden.core.procfs import parse_locks, parse_mountinfo, parse_mounts, parse_mountstats

PARSERS_BY_PREFIX = {
    "mountstats-": parse_mountstats,
    "mountinfo-": parse_mountinfo,
    "mounts-": parse_mounts,
    "locks-": parse_locks,
}
#: Lines that are malformed in the samples themselves (see their SOURCES.md).
KNOWN_SKIPPED_LINES = {"mountstats-nfs3-nfs40-nfs42-telegraf.txt": (231,)}
SHARED_SAMPLES = sorted(path.name for path in shared_samples_dir().glob("*.txt"))
LOCAL_COPIES = sorted(path.name for path in LOCAL_SAMPLES.glob("*.txt"))


def require_shared_samples() -> Path:
    directory = shared_samples_dir()
    if not directory.is_dir():
        pytest.fail(f"the shared procfs samples are not at {directory}: check out the shared fixtures beside the "
                    "repository (../shared/fixtures/procfs), or point MOUNTWARDEN_SHARED_FIXTURES at their parent")
    return directory


@pytest.mark.parametrize("name", SHARED_SAMPLES or ["(no shared samples found)"])
def test_every_shared_sample_parses_with_the_parser_its_name_calls_for(name):
    directory = require_shared_samples()
    parsers = [parser for prefix, parser in PARSERS_BY_PREFIX.items() if name.startswith(prefix)]
    assert len(parsers) == 1, f"no parser is chosen for the shared sample {name}"

    result = parsers[0]((directory / name).read_text(encoding="utf-8"))

    assert result.skipped_line_numbers == KNOWN_SKIPPED_LINES.get(name, ())


@pytest.mark.parametrize("name", LOCAL_COPIES)
def test_local_copies_are_byte_for_byte_the_shared_samples(name):
    directory = require_shared_samples()

    assert (LOCAL_SAMPLES / name).read_bytes() == (directory / name).read_bytes()


def test_sources_md_names_every_local_copy_and_its_license():
    sources = (LOCAL_SAMPLES / "SOURCES.md").read_text(encoding="utf-8")

    assert LOCAL_COPIES
    for name in LOCAL_COPIES:
        (row,) = [line for line in sources.splitlines() if line.startswith(f"| `{name}` |")]
        assert "MIT" in row or "Apache-2.0" in row, row
        assert "GPL" not in row, row
