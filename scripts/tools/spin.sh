#!/usr/bin/env bash
# Install the SPIN model checker (Debian package `spin`) used by docs/model/check.sh and
# tests/model. Idempotent: does nothing when `spin` is already on PATH; runs `apt-get update`
# only when the package is missing. SPIN compiles its verifiers with gcc (cc), which must be
# present. Needs root (or sudo) for apt-get.
set -euo pipefail

if command -v spin >/dev/null 2>&1; then
    echo "spin.sh: $(spin -V 2>&1 | head -n1) already installed"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends spin
    echo "spin.sh: installed $(spin -V 2>&1 | head -n1)"
fi

if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    echo "spin.sh: a C compiler (gcc) is required to build SPIN verifiers" >&2
    exit 1
fi
