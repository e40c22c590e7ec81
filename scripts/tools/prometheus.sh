#!/usr/bin/env bash
# Install Prometheus (incl. promtool) and Alertmanager from Debian, idempotently.
#
# Used by `make test` / .ci/run before the `prometheus`-marked tests. Installs only what is
# missing; `apt-get update` runs only when an install is needed. Packages live in the system
# (outside the repo); nothing is written into the working tree.
set -euo pipefail

need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 \
  || command -v alertmanager >/dev/null 2>&1 \
  || need+=(prometheus-alertmanager)

if [ "${#need[@]}" -eq 0 ]; then
  echo "prometheus.sh: promtool, prometheus and alertmanager already installed"
  exit 0
fi

# Deduplicate package names.
mapfile -t pkgs < <(printf '%s\n' "${need[@]}" | sort -u)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends keeps the install small; policy-rc.d stops the packages'
# postinst from starting system services (tests start their own servers on loopback).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
trap '[ "$created_policy" -eq 1 ] && $SUDO rm -f "$policy"' EXIT
$SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}"

command -v promtool >/dev/null 2>&1 || { echo "prometheus.sh: promtool still missing" >&2; exit 1; }
echo "prometheus.sh: installed ${pkgs[*]}"
