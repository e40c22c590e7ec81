#!/usr/bin/env bash
# Install Debian's chromium (the only browser that runs here) for the Playwright tests of
# `tenure ui`, idempotently. Playwright's own browser downloads are not reachable; the tests
# launch this binary through executable_path.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "chromium.sh: chromium already installed ($(command -v chromium))"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
echo "chromium.sh: installed $(chromium --version 2>/dev/null || echo chromium)"
