#!/usr/bin/env bash
# `make lock`: resolve pyproject.toml into the hash-locked requirements files under requirements/, with uv.
#   requirements/dev.txt      the project's dependencies, its test and bench extras and its build backend:
#                             what `make venv` (and so `make test` and .ci/run) installs
#   requirements/runtime.txt  the dependencies alone, at the same versions: what the image installs
#   requirements/build.txt    the build backend alone, at the same versions: what builds the image's wheel
# Universal (every platform and Python >= 3.11), so one lock serves a laptop, CI and the image alike.
set -euo pipefail
uv=${1:?usage: hack/lock.sh PATH-TO-UV}
cd "$(dirname "$0")/.."

build_requires=$(python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
compile() { "$uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
              --custom-compile-command "make lock" "$@"; }

# dev first: the other two are constrained to its versions, so the image runs what the tests ran.
# uv names each input in the files' "# via" notes: this one says where its lines come from.
build_in=requirements/pyproject-build-system.in
echo "$build_requires" >"$build_in"
trap 'rm -f "$build_in"' EXIT
compile pyproject.toml "$build_in" --extra test --extra bench --output-file requirements/dev.txt
compile pyproject.toml --constraint requirements/dev.txt --output-file requirements/runtime.txt
compile "$build_in" --constraint requirements/dev.txt --output-file requirements/build.txt
