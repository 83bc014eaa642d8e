#!/usr/bin/env bash
# Fetches promtool (the chart's alert tests run `promtool test rules`) from Debian's prometheus package: the
# .deb is downloaded with apt (no Prometheus server is installed or started) and only /usr/bin/promtool is
# kept, cached in ~/.cache/mountwarden/promtool/<package version>/. Prints the directory on its last line.
# Needs apt's lists (root runs apt-get update when they lack the package).
set -euo pipefail
cache_root=${MOUNTWARDEN_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mountwarden/promtool}
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: \([0-9].*\)$/\1/p'; }
version=$(candidate)
if [ -z "$version" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "promtool: apt knows no prometheus package: run as root, or: sudo apt-get update" >&2
    exit 1
  fi
  echo "promtool: apt knows no prometheus package: apt-get update" >&2
  apt-get update -q >&2
  version=$(candidate)
  [ -n "$version" ] || { echo "promtool: Debian's prometheus package is not in apt's sources" >&2; exit 1; }
fi
out="$cache_root/${version//[^A-Za-z0-9.+-]/_}"
if [ -x "$out/promtool" ]; then
  echo "promtool: cached in $out" >&2
  echo "$out"
  exit 0
fi
work=$(mktemp -d "$cache_root/.partial.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q "prometheus=$version" >&2 2>&1)
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$work/out"
mv "$work/root/usr/bin/promtool" "$work/out/promtool"
"$work/out/promtool" --version >&2
rm -rf "$out"
mv "$work/out" "$out"
echo "promtool: Debian prometheus $version: $out" >&2
echo "$out"
