"""Build the archive plugins/krew/mountwarden.yaml installs (`make krew`): the plugin's launcher and the licence,
byte for byte the same on every machine (sorted, no owners, no times), so that the manifest's sha256 is checked by
tests/unit/test_krew_manifest.py. Prints the archive's path and sha256."""

import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the archive holds: name in the archive -> file in the repository.
FILES = {"kubectl-mountwarden": ROOT / "plugins/krew/kubectl-mountwarden", "LICENSE": ROOT / "LICENSE"}


def archive_bytes() -> bytes:
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, path in sorted(FILES.items()):
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o755 if name.startswith("kubectl-") else 0o644
            tar.addfile(info, io.BytesIO(data))
    zipped = io.BytesIO()
    with gzip.GzipFile(fileobj=zipped, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(tarred.getvalue())
    return zipped.getvalue()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "dist/krew/kubectl-mountwarden.tar.gz")
    out.parent.mkdir(parents=True, exist_ok=True)
    data = archive_bytes()
    out.write_bytes(data)
    print(f"{out} sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
