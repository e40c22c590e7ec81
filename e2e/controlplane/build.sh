#!/usr/bin/env bash
# Build the e2e control plane (etcd, kube-apiserver, kube-controller-manager) from the Go
# module proxy at the versions pinned in go.mod, into a cache outside the repository:
#   ${TENURE_E2E_CACHE:-$HOME/.cache/tenure-e2e}/<version>/bin
# Idempotent: exits at once when the binaries for this version are already there.
# Prints the bin directory on stdout as its last line; `build.sh --print-bin-dir` only prints it.
# Cold build: roughly 15-25 minutes on 2 cores (module download + compile); warm: instant.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$here/go.mod")"
version="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
cache="${TENURE_E2E_CACHE:-$HOME/.cache/tenure-e2e}"
bin="$cache/$version/bin"
binaries=(etcd kube-apiserver kube-controller-manager)

if [[ "${1:-}" == "--print-bin-dir" ]]; then
    echo "$bin"
    exit 0
fi

have_all() {
    local b
    for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
    [[ -f "$bin/.complete" ]]
}

if have_all; then
    echo "$bin"
    exit 0
fi

GO="${GO:-}"
if [[ -z "$GO" ]]; then
    if command -v go >/dev/null 2>&1; then GO="$(command -v go)";
    elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go;
    else echo "build.sh: no Go toolchain found (set GO=/path/to/go)" >&2; exit 1; fi
fi

export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
jobs="${TENURE_E2E_BUILD_JOBS:-2}"

major="${K8S_VERSION#v}"; major="${major%%.*}"
minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
vpkg=k8s.io/component-base/version
ldflags="-s -w \
 -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor \
 -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"

tmp="$cache/$version/bin.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$SECONDS
echo "build.sh: building $version into $bin with $("$GO" version) (-p $jobs)" >&2
cd "$here"
"$GO" build -p "$jobs" -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
echo "build.sh: etcd built after $((SECONDS - start))s" >&2
"$GO" build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "build.sh: kube-apiserver built after $((SECONDS - start))s" >&2
"$GO" build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
echo "build.sh: kube-controller-manager built after $((SECONDS - start))s" >&2

"$tmp/kube-apiserver" --version >&2
"$tmp/etcd" --version >&2
touch "$tmp/.complete"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: done in $((SECONDS - start))s" >&2
echo "$bin"
