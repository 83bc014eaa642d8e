#!/usr/bin/env bash
# Builds syft, the SBOM generator that describes the image `make image` builds (SPDX), from source through the
# Go module proxy, once, into ~/.cache/mountwarden/sbom/<key>/ keyed by its go.mod and go.sum. Prints the
# directory on its last line. About 8 minutes cold on 2 cores, instant warm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "require" && $2 == "github.com/anchore/syft" {print $3}' "$here/syft/go.mod")
sum=$(cat "$here/syft/go.mod" "$here/syft/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
cache_root=${MOUNTWARDEN_SBOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mountwarden/sbom}
out="$cache_root/syft-${version}_${sum}"
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if [ -x "$out/syft" ]; then
  echo "sbom: cached in $out" >&2
  echo "$out"
  exit 0
fi
start=$(date +%s)
echo "sbom: building syft $version" >&2
mkdir -p "$out.partial"
(cd "$here/syft" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X main.version=${version#v} -X main.gitCommit=none -X main.buildDate=1970-01-01T00:00:00Z" \
  -o "$out.partial/syft" github.com/anchore/syft/cmd/syft)
rm -rf "$out"
mv "$out.partial" "$out"
echo "sbom: done in $(( $(date +%s) - start ))s: $out" >&2
echo "$out"
