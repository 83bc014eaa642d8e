#!/usr/bin/env bash
# Installs the Debian packages the kernel lab needs on the host, if any is missing:
# QEMU (TCG or KVM), debootstrap, cpio and zstd to build the image, socat for the real node's
# network forward, and apt's lists so that
# the kernel package can be found. Needs root when something is missing.
set -euo pipefail
packages=()
command -v qemu-system-x86_64 >/dev/null || packages+=(qemu-system-x86)
command -v debootstrap >/dev/null || packages+=(debootstrap)
command -v cpio >/dev/null || packages+=(cpio)
command -v zstd >/dev/null || packages+=(zstd)
# The real node's one network forward (QEMU starts a socat per connection to the API server).
command -v socat >/dev/null || packages+=(socat)
# SeaBIOS comes with qemu-system-x86 through a recommends on some releases: ask for it by file.
[ -e /usr/share/seabios/bios-256k.bin ] || packages+=(seabios)
lists_stale=0
policy=$(apt-cache policy linux-image-amd64 2>/dev/null || true)
grep -q 'Candidate: [0-9]' <<<"$policy" || lists_stale=1
if [ ${#packages[@]} -eq 0 ] && [ $lists_stale -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "lab: missing ${packages[*]:-apt lists}: run as root, or: sudo apt-get update && sudo apt-get install ${packages[*]}" >&2
  exit 1
fi
echo "lab: installing ${packages[*]:-nothing} (apt lists stale: $lists_stale)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
[ ${#packages[@]} -eq 0 ] || apt-get install -y -q --no-install-recommends "${packages[@]}" >&2
