#!/usr/bin/env bash
# Runs every tool installer in this folder (each is idempotent and caches outside the repo).
# Docker, kind and its images only for the kind suite (TENURE_KIND_E2E in the Makefile): with
# `auto`, a machine where no Docker engine can run skips them (and `make test-kind` then skips
# the suite, saying so); with `1`, that is an error.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kind_mode="${TENURE_KIND_E2E:-0}"
for script in "$here"/*.sh; do
  name="$(basename "$script")"
  case "${name}" in
    all.sh|env.sh) continue ;;
    docker.sh|kind.sh) [[ "${kind_mode}" != 0 ]] || continue ;;
  esac
  echo "== ${name}"
  if [[ "${name}" == docker.sh && "${kind_mode}" == auto ]]; then
    if ! bash "$script"; then
      echo "== docker.sh failed: no Docker engine here, the kind suite is skipped (TENURE_KIND_E2E=auto;" \
           "TENURE_KIND_E2E=1 makes this an error)" >&2
      kind_mode=0
    fi
    continue
  fi
  bash "$script"
done
