#!/usr/bin/env bash
# Builds the kernel lab image (Debian 12 kernel + a minimal root with the NFS server and
# client, from Debian packages only) once into ~/.cache/mountwarden/lab/<versions>/, after
# installing the host packages it needs. Prints the image's directory on its last line.
# Usage: build.sh [lab|node]   (node: the lab plus what the real node needs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/host-deps.sh"
python=${PYTHON:-$here/../../.venv/bin/python}
exec "$python" -m mountwarden lab build --recipe "${1:-lab}" --print-dir
