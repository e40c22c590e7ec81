#!/usr/bin/env bash
# Install kind and, on machines without a container registry, build every image a kind cluster
# and e2e/kind/run.sh need, locally. Idempotent; everything is cached outside the repository,
# keyed by version: binaries in ${TENURE_KIND_CACHE:-$HOME/.cache/tenure-kind}/<versions>/bin,
# images in the Docker engine (scripts/tools/docker.sh keeps its data root in ~/.cache).
#
# Two paths, chosen by TENURE_KIND_IMAGES:
#   public  A machine with Docker and registry access: only the kind binary is built (Go module
#           proxy); kind pulls its public node image (kindest/node) and the Dockerfile pulls
#           python:3.13-slim. Nothing else is built.
#   local   (default) No registry reachable, as on the CI machines: build from the Go module proxy
#           and Debian's apt archive only:
#             tenure/debian:bookworm      debootstrap --variant=minbase + docker import
#             localhost/tenure/kind-base:KEY  kind's base image (systemd, containerd v2 and
#                                         crictl from the module proxy, Debian's runc and CNI); "localhost/" so that kind's unconditional
#                                         `docker pull` of it only ever asks loopback
#             localhost/tenure/kind-node:KEY       `kind build node-image --type file` from a Kubernetes
#                                         server tarball assembled from module-built binaries and
#                                         image archives (kube-*, pause, etcd, coredns, kindnetd,
#                                         local-path-provisioner/helper), all preloaded
#             tenure/python:bookworm      PYTHON_IMAGE for the repository's Dockerfile
#             tenure/postgres:15, tenure/prometheus:local (module-built, with
#                                         Kubernetes discovery), tenure/alertmanager:bookworm
#           Prints the node image's name as its last line; e2e/kind/run.sh passes it to kind.
# Skips (exit 0, with a message) when no Docker engine can run, unless TENURE_KIND_REQUIRED=1.
# Cold: roughly 20-30 minutes on 2 cores (mostly Go builds of Kubernetes and CoreDNS); warm: seconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
log() { echo "kind.sh: $*" >&2; }

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.36.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.3.4}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.2}"
LOCAL_PATH_VERSION="${LOCAL_PATH_VERSION:-v0.0.30}"
# Prometheus 3.x from its Go module (v0.316.0 is Prometheus 3.16): Debian's package is built
# without Kubernetes service discovery ("field kubernetes_sd_configs not found").
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$root/e2e/controlplane/go.mod")"
mode="${TENURE_KIND_IMAGES:-local}"
cache="${TENURE_KIND_CACHE:-$HOME/.cache/tenure-kind}"
tools_bin="${TENURE_TOOLS_DIR:-$HOME/.cache/tenure-tools}/bin"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
jobs="${TENURE_KIND_BUILD_JOBS:-2}"
mkdir -p "$cache" "$tools_bin"

if ! DOCKER_HOST="$(bash "$here/docker.sh" | tail -n 1)"; then
    if [[ "${TENURE_KIND_REQUIRED:-0}" == 1 ]]; then log "no Docker engine"; exit 1; fi
    log "no Docker engine can run here: skipping kind (the kind suite will be skipped)"
    exit 0
fi
export DOCKER_HOST
# The classic builder: BuildKit would fetch its Dockerfile frontend from a registry.
export DOCKER_BUILDKIT=0

# --- Go builds (module proxy), each into a versioned directory with a .complete stamp ---------
go_env=(env GOFLAGS="-buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0)
go_install() {  # name package@version
    local pkg="$2" dir="$cache/go/$1-${2##*@}"
    if [[ ! -f "$dir/.complete" ]]; then
        log "building $pkg (go install)"
        mkdir -p "$dir"
        "${go_env[@]}" GOBIN="$dir" nice -n 5 "$GO" install -p "$jobs" -trimpath -ldflags "-s -w" "$pkg"
        touch "$dir/.complete"
    fi
    echo "$dir"
}
kind_dir="$(go_install kind "sigs.k8s.io/kind@$KIND_VERSION")"
ln -sf "$kind_dir/kind" "$tools_bin/kind"
"$tools_bin/kind" version >&2

if [[ "$mode" == public ]]; then
    log "TENURE_KIND_IMAGES=public: kind will pull its public node image; nothing else to build"
    exit 0
fi
[[ "$mode" == local ]] || { log "TENURE_KIND_IMAGES must be local or public, not '$mode'"; exit 2; }

kind_src="$("${go_env[@]}" "$GO" mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
crictl_dir="$(go_install crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION")"
containerd_dir="$cache/go/containerd-$CONTAINERD_VERSION"
if [[ ! -f "$containerd_dir/.complete" ]]; then
    log "building containerd $CONTAINERD_VERSION, ctr and containerd-shim-runc-v2 (go install)"
    mkdir -p "$containerd_dir"
    cpkg=github.com/containerd/containerd/v2
    "${go_env[@]}" GOBIN="$containerd_dir" nice -n 5 "$GO" install -p "$jobs" -trimpath \
        -ldflags "-s -w -X $cpkg/version.Version=$CONTAINERD_VERSION" \
        -tags "no_btrfs no_devmapper no_zfs no_aufs" "$cpkg/cmd/containerd@$CONTAINERD_VERSION" \
        "$cpkg/cmd/ctr@$CONTAINERD_VERSION" "$cpkg/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
    touch "$containerd_dir/.complete"
fi
lpp_dir="$(go_install local-path-provisioner "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION")"
# CoreDNS with the plugins a kubeadm Corefile uses (kind/coredns/main.go), in its own module.
coredns_dir="$cache/go/coredns-$COREDNS_VERSION"
if [[ ! -f "$coredns_dir/.complete" ]]; then
    log "building CoreDNS $COREDNS_VERSION (the kubeadm Corefile's plugins only)"
    rm -rf "$coredns_dir"; mkdir -p "$coredns_dir/src"
    cp "$here/kind/coredns/main.go" "$coredns_dir/src/"
    (cd "$coredns_dir/src" \
        && "${go_env[@]}" "$GO" mod init tenure.dev/kind-coredns >/dev/null 2>&1 \
        && "${go_env[@]}" GOFLAGS="-mod=mod -buildvcs=false" "$GO" get "github.com/coredns/coredns@$COREDNS_VERSION" \
        && "${go_env[@]}" GOFLAGS="-mod=mod -buildvcs=false" "$GO" mod tidy \
        && "${go_env[@]}" GOFLAGS="-mod=mod -buildvcs=false" nice -n 5 "$GO" build -p "$jobs" -trimpath \
            -ldflags "-s -w" -o "$coredns_dir/coredns" .)
    touch "$coredns_dir/.complete"
fi

# Prometheus with only the Kubernetes discovery plugin (its build tags; the rest of its SD
# dependencies would double the build).
prom_dir="$cache/go/prometheus-$PROMETHEUS_VERSION"
if [[ ! -f "$prom_dir/.complete" ]]; then
    log "building Prometheus $PROMETHEUS_VERSION (Kubernetes discovery only)"
    mkdir -p "$prom_dir"
    "${go_env[@]}" GOBIN="$prom_dir" nice -n 5 "$GO" install -p "$jobs" -trimpath -ldflags "-s -w" \
        -tags remove_all_sd,enable_kubernetes_sd \
        "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
    touch "$prom_dir/.complete"
fi

# Kubernetes node binaries from the same pinned module graph as the e2e control plane
# (e2e/controlplane/go.mod), built in a copy of that module so the repository stays untouched.
cp_bin="$(bash "$here/controlplane.sh" | tail -n 1)"
k8s_bin="$cache/k8s-$K8S_VERSION/bin"
if [[ ! -f "$k8s_bin/.complete" ]]; then
    mod="$cache/k8s-$K8S_VERSION/module"
    mkdir -p "$mod" "$k8s_bin"
    sed 's#^module .*#module tenure.dev/e2e/kindnode#' "$root/e2e/controlplane/go.mod" > "$mod/go.mod"
    cp "$root/e2e/controlplane/go.sum" "$mod/go.sum"
    major="${K8S_VERSION#v}"; major="${major%%.*}"
    minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
    vpkg=k8s.io/component-base/version
    ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor \
 -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
    printf '//go:build tools\n\npackage tools\n\nimport (\n' > "$mod/tools.go"
    for c in kubeadm kubelet kube-proxy kube-scheduler kubectl; do
        printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c" >> "$mod/tools.go"
    done
    printf ')\n' >> "$mod/tools.go"
    for c in kubeadm kubelet kube-proxy kube-scheduler kubectl; do
        if [[ ! -x "$k8s_bin/$c" ]]; then
            log "building $c $K8S_VERSION"
            (cd "$mod" && "${go_env[@]}" GOFLAGS="-mod=mod -buildvcs=false" nice -n 5 "$GO" build \
                -p "$jobs" -trimpath -ldflags "$ldflags" -o "$k8s_bin/$c.tmp" "k8s.io/kubernetes/cmd/$c")
            mv "$k8s_bin/$c.tmp" "$k8s_bin/$c"
        fi
    done
    touch "$k8s_bin/.complete"
fi

# --- Images --------------------------------------------------------------------------------
bash "$here/kind/debian-rootfs.sh" tenure/debian:bookworm

ctx="$cache/context"
rm -rf "$ctx"; mkdir -p "$ctx/bin"
cp "$here/kind/"*.sh "$here/kind/pause.c" "$ctx/"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
if [[ ! -x "$cache/pause-bin/pause" ]]; then
    mkdir -p "$cache/pause-bin"
    gcc -Os -static -o "$cache/pause-bin/pause" "$here/kind/pause.c"
fi
cp "$cache/pause-bin/pause" "$ctx/bin/pause"
cp "$cp_bin/kube-apiserver" "$cp_bin/kube-controller-manager" "$cp_bin/etcd" "$ctx/bin/"
cp "$k8s_bin/kube-scheduler" "$k8s_bin/kube-proxy" "$ctx/bin/"
cp "$coredns_dir/coredns" "$lpp_dir/local-path-provisioner" "$prom_dir/prometheus" "$ctx/bin/"

etcd_tag="$("$k8s_bin/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null | awk -F: '/\/etcd:/ {print $2}')"
coredns_tag="$("$k8s_bin/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null | awk -F: '/coredns:/ {print $2}')"
cni_image="$(grep -o 'docker.io/kindest/kindnetd:[^"]*' "$kind_src/pkg/build/nodeimage/const_cni.go" | head -n 1)"
lpp_image="$(grep -o 'docker.io/kindest/local-path-provisioner:[^"]*' "$kind_src/pkg/build/nodeimage/const_storage.go" | head -n 1)"
helper_image="$(grep -o 'docker.io/kindest/local-path-helper:[^"]*' "$kind_src/pkg/build/nodeimage/const_storage.go" | head -n 1)"
pause_image="$(awk -F'"' '/sandbox_image/ {print $2}' "$kind_src/images/base/files/etc/containerd/config.toml")"

# image (scripts/tools/kind/images/NAME.Dockerfile) -> tag. Kubernetes' own images carry the version the binaries were built from.
declare -A tags=(
    [kube-apiserver]="registry.k8s.io/kube-apiserver:$K8S_VERSION"
    [kube-controller-manager]="registry.k8s.io/kube-controller-manager:$K8S_VERSION"
    [kube-scheduler]="registry.k8s.io/kube-scheduler:$K8S_VERSION"
    [kube-proxy]="registry.k8s.io/kube-proxy:$K8S_VERSION"
    [pause]="$pause_image"
    [etcd]="registry.k8s.io/etcd:$etcd_tag"
    [coredns]="registry.k8s.io/coredns/coredns:$coredns_tag"
    [kindnetd]="$cni_image"
    [local-path-provisioner]="$lpp_image"
    [local-path-helper]="$helper_image"
    [python]="tenure/python:bookworm"
    [postgres]="tenure/postgres:15"
    [prometheus]="tenure/prometheus:local"
    [alertmanager]="tenure/alertmanager:bookworm"
)
for target in "${!tags[@]}"; do
    log "image ${tags[$target]} (target $target)"
    docker build -q --network host -f "$here/kind/images/$target.Dockerfile" \
        -t "${tags[$target]}" "$ctx" >/dev/null
done

# kind base image: kind's own files from the module plus Debian packages (base.Dockerfile).
bctx="$cache/base-context"
rm -rf "$bctx"; mkdir -p "$bctx"
cp -r "$kind_src/images/base/files" "$bctx/files"; chmod -R u+w "$bctx"
cp "$crictl_dir/crictl" "$containerd_dir/containerd" "$containerd_dir/ctr" \
    "$containerd_dir/containerd-shim-runc-v2" "$here/runc-wrapper.py" "$bctx/"
base_key="$(cat "$here/kind/base.Dockerfile" "$here/runc-wrapper.py" | sha256sum | cut -c1-12)"
base_image="localhost/tenure/kind-base:$KIND_VERSION-$base_key"
if ! docker image inspect "$base_image" >/dev/null 2>&1; then
    log "image $base_image"
    docker build -q --network host -f "$here/kind/base.Dockerfile" -t "$base_image" "$bctx" >/dev/null
fi

# Node image: keyed by the base image and every preloaded image's ID.
k8s_images=(kube-apiserver kube-controller-manager kube-scheduler)
extras=(kube-proxy pause etcd coredns kindnetd local-path-provisioner local-path-helper)
ids="$(for t in "${k8s_images[@]}" "${extras[@]}"; do docker image inspect -f '{{.Id}}' "${tags[$t]}"; done)"
node_key="$(printf '%s\n%s\n%s\n' "$(docker image inspect -f '{{.Id}}' "$base_image")" "$ids" \
    "$(sha256sum "$k8s_bin/kubeadm" "$k8s_bin/kubelet" "$k8s_bin/kubectl")" | sha256sum | cut -c1-12)"
node_image="localhost/tenure/kind-node:$K8S_VERSION-$node_key"
if ! docker image inspect "$node_image" >/dev/null 2>&1; then
    log "image $node_image (kind build node-image)"
    tball="$cache/server-tarball"
    rm -rf "$tball"; mkdir -p "$tball/kubernetes/server/bin"
    echo "$K8S_VERSION" > "$tball/kubernetes/version"
    cp "$k8s_bin/kubeadm" "$k8s_bin/kubelet" "$k8s_bin/kubectl" "$tball/kubernetes/server/bin/"
    for t in "${k8s_images[@]}"; do
        docker save -o "$tball/kubernetes/server/bin/$t.tar" "${tags[$t]}"
    done
    # kind reads a fixed list of four archives; images kind would otherwise pull (and fail to,
    # without a registry) ride in the kube-proxy archive, which `docker save` may fill with many.
    extra_tags=(); for t in "${extras[@]}"; do extra_tags+=("${tags[$t]}"); done
    docker save -o "$tball/kubernetes/server/bin/kube-proxy.tar" "${extra_tags[@]}"
    # kind reads an archive's tags from whichever of `repositories` (every image) and
    # `manifest.json` (only its first image) comes first: put `repositories` first.
    mkdir "$tball/x"
    tar -C "$tball/x" -xf "$tball/kubernetes/server/bin/kube-proxy.tar"
    # Docker shortens docker.io/NAME to NAME there; kind compares full names.
    python3 - "$tball/x/repositories" <<'PY'
import json, sys
path = sys.argv[1]
repos = json.load(open(path))
full = {}
for name, tags in repos.items():
    first = name.split("/")[0]
    qualified = "." in first or ":" in first or first == "localhost"
    full[name if qualified else ("docker.io/" + name if "/" in name else "docker.io/library/" + name)] = tags
json.dump(full, open(path, "w"))
PY
    (cd "$tball/x" && find . -mindepth 1 -maxdepth 1 ! -name repositories -printf '%P\n' | sort \
        | tar -cf "$tball/kubernetes/server/bin/kube-proxy.tar" repositories -T -)
    rm -rf "$tball/x"
    tar -C "$tball" -cf - kubernetes | gzip -1 > "$tball.tar.gz"   # kind reads only gzip
    rm -rf "$tball"
    "$tools_bin/kind" build node-image --type file --base-image "$base_image" \
        --image "$node_image" "$tball.tar.gz" >&2
    rm -f "$tball.tar.gz"
fi
echo "$node_image" > "$cache/node-image"
log "node image $node_image"
echo "$node_image"
