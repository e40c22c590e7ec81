#!/usr/bin/env bash
# Build the Debian bookworm base image IMAGE (default tenure/debian:bookworm) without a registry:
# `debootstrap --variant=minbase bookworm` into a temporary directory, then `docker import`.
# About 3 minutes; idempotent (does nothing when IMAGE exists). Needs root, apt and Docker.
set -euo pipefail
image="${1:-tenure/debian:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$image" >/dev/null 2>&1; then exit 0; fi
if ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
tmp="$(mktemp -d "${TMPDIR:-/tmp}/tenure-debootstrap.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "debian-rootfs.sh: debootstrap --variant=minbase bookworm ($mirror)" >&2
debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/log" 2>&1 \
    || { tail -n 30 "$tmp/log" >&2; exit 1; }
cat > "$tmp/rootfs/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
SRC
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
tar -C "$tmp/rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "debian-rootfs.sh: imported $image" >&2
