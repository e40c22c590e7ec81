#!/usr/bin/env bash
# Install the e2e control plane (etcd, kube-apiserver, kube-controller-manager built from the
# Go module proxy) into ${TENURE_E2E_CACHE:-$HOME/.cache/tenure-e2e}. Idempotent and fast when
# cached; the first build takes a while (see e2e/controlplane/build.sh). Needs openssl for the
# test certificates.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! command -v openssl >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl
fi
exec bash "$root/e2e/controlplane/build.sh" "$@"
