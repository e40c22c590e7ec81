#!/usr/bin/env bash
# Install libfaketime (Debian package `faketime`, which pulls in `libfaketime`) for the chaos
# suite's clock-skew fault (tests/chaos): worker processes run with LD_PRELOAD=libfaketime and
# FAKETIME="+5m"/"-5m". Idempotent: does nothing when the library is already present.
# Prints the library path on success.
set -euo pipefail
find_lib() {
  for candidate in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 \
                   /usr/local/lib/faketime/libfaketime.so.1; do
    if [[ -f "${candidate}" ]]; then
      echo "${candidate}"
      return 0
    fi
  done
  return 1
}
if lib="$(find_lib)"; then
  echo "${lib}"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends faketime libfaketime >/dev/null
find_lib
