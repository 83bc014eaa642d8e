#!/usr/bin/env bash
# Builds what the real node in the kernel lab VM runs that Debian does not package: the kubelet,
# from the same k8s.io/kubernetes version as the local control plane (hack/testbin), and the
# pods' pause binary. Cached in ~/.cache/mountwarden/nodebin/<key>/ apart from the control plane,
# so that neither rebuilds the other. Prints the directory on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../testbin/versions.env
source "$here/../testbin/versions.env"
sum=$(cat "$here"/*/go.mod "$here"/*/go.sum "$here"/pause/main.go "$here/../testbin/versions.env" 2>/dev/null \
  | sha256sum | cut -c1-12)
key="k8s-${KUBERNETES_VERSION}_${sum}"
cache_root=${MOUNTWARDEN_NODEBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mountwarden/nodebin}
out="$cache_root/$key"
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if [ -x "$out/kubelet" ] && [ -x "$out/pause" ]; then
  echo "nodebin: cached in $out" >&2
  echo "$out"
  exit 0
fi
mkdir -p "$out.partial"
export CGO_ENABLED=0
kmajor=${KUBERNETES_VERSION%%.*}; rest=${KUBERNETES_VERSION#*.}; kminor=${rest%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v${KUBERNETES_VERSION} -X $pkg.gitMajor=${kmajor} -X $pkg.gitMinor=${kminor}"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
start=$(date +%s)
[ -x "$out.partial/pause" ] || (cd "$here/pause" && go build -trimpath -ldflags "-s -w" -o "$out.partial/pause" .)
echo "nodebin: building the kubelet v${KUBERNETES_VERSION} ($(( $(date +%s) - start ))s)" >&2
[ -x "$out.partial/kubelet" ] || (cd "$here/kubelet" && go build -trimpath -ldflags "$ldflags" \
  -o "$out.partial/kubelet" k8s.io/kubernetes/cmd/kubelet)
rm -rf "$out"
mv "$out.partial" "$out"
echo "nodebin: done in $(( $(date +%s) - start ))s: $out" >&2
echo "$out"
