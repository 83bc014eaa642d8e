#!/usr/bin/env bash
# `make lock`: resolve pyproject.toml into the hash-locked requirements files under requirements/, with uv.
#   requirements/dev.txt      the project's dependencies, its test and bench extras and its build backend:
#                             what `make venv` (and so `make test` and .ci/run) installs
#   requirements/runtime.txt  the dependencies alone, at the same versions: what the image installs
#   requirements/build.txt    the build backend and the image's installer, at the same versions: what builds the
#                             image's wheel and installs the locked wheels into its root (`make image`, Dockerfile)
# Universal (every platform and Python >= 3.11), so one lock serves a laptop, CI and the image alike.
set -euo pipefail
uv=${1:?usage: hack/lock.sh PATH-TO-UV}
cd "$(dirname "$0")/.."

build_requires=$(python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
image_requires=$(python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["image"]))')
compile() { "$uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
              --custom-compile-command "make lock" "$@"; }

# dev first: the other two are constrained to its versions, so the image runs what the tests ran.
# uv names each input in the files' "# via" notes: this one says where its lines come from.
build_in=requirements/pyproject-build-system.in
image_in=requirements/pyproject-image-extra.in
echo "$build_requires" >"$build_in"
echo "$image_requires" >"$image_in"
trap 'rm -f "$build_in" "$image_in"' EXIT
compile pyproject.toml "$build_in" --extra test --extra bench --extra image --output-file requirements/dev.txt
compile pyproject.toml --constraint requirements/dev.txt --output-file requirements/runtime.txt
compile "$build_in" "$image_in" --constraint requirements/dev.txt --output-file requirements/build.txt
