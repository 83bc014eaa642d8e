#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, helm) from source through the Go module proxy,
# once, into a cache outside the checkout keyed by the pinned versions.
# Prints the directory holding the binaries on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

# The key also covers go.mod/go.sum so that a changed dependency graph rebuilds.
sum=$(cat "$here"/*/go.mod "$here"/*/go.sum "$here/versions.env" | sha256sum | cut -c1-12)
key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_${sum}"
cache_root=${MOUNTWARDEN_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mountwarden/testbin}
out="$cache_root/$key"

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)
mkdir -p "$cache_root"
# One build at a time: parallel test sessions and `make run` may all ask at once.
exec 9>"$cache_root/.build.lock"
flock 9
complete=1
for b in "${binaries[@]}"; do [ -x "$out/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then
  echo "testbin: cached in $out" >&2
  echo "$out"
  exit 0
fi

mkdir -p "$out.partial"
export CGO_ENABLED=0
start=$(date +%s)
log() { echo "testbin: $* ($(( $(date +%s) - start ))s)" >&2; }

kmajor=${KUBERNETES_VERSION%%.*}; rest=${KUBERNETES_VERSION#*.}; kminor=${rest%%.*}
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=v${KUBERNETES_VERSION} -X $pkg.gitMajor=${kmajor} -X $pkg.gitMinor=${kminor}"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # module dir, ldflags, packages...
  local dir=$1 flags=$2; shift 2
  log "building $* in $dir"
  (cd "$here/$dir" && go build -trimpath -ldflags "$flags" -o "$out.partial/" "$@")
}

if [ ! -x "$out.partial/etcd" ]; then
  build etcd "-s -w" go.etcd.io/etcd/server/v3
  mv "$out.partial/server" "$out.partial/etcd"  # go names the binary after the module's last element
fi
[ -x "$out.partial/kwok" ] || build kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok
# Helm's own release flags: without the Kubernetes version, `helm template` assumes 1.20.
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=${kmajor} -X $pkg.k8sVersionMinor=${kminor}"
done
[ -x "$out.partial/helm" ] || build helm "$helm_ldflags" helm.sh/helm/v3/cmd/helm
[ -x "$out.partial/kubectl" ] || build kubernetes "$kube_ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

rm -rf "$out"
mv "$out.partial" "$out"
log "done: $out"
echo "$out"
