#!/usr/bin/env bash
# Builds mountwarden's image (an OCI image layout archive, no Docker engine, no registry) from hack/image/debian.lock
# and requirements/runtime.txt, with its SBOM beside it (syft, hack/sbom), once into
# ~/.cache/mountwarden/image/<version>_<key>/, keyed by a hash of every input. Prints the directory on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# apt's lists name the locked versions (the lab's host packages come with them).
"$here/../lab/host-deps.sh"
syft_dir=$("$here/../sbom/build.sh" | tail -n 1)
python=${PYTHON:-$here/../../.venv/bin/python}
exec "$python" -m mountwarden image build --syft "$syft_dir/syft" --print-dir
