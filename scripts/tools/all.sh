#!/usr/bin/env bash
# Runs every tool installer in this folder (each is idempotent and caches outside the repo).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for script in "$here"/*.sh; do
  case "$(basename "$script")" in
    all.sh|env.sh) continue ;;
    # Docker, kind and its images only for the kind suite (see TENURE_KIND_E2E in the Makefile).
    docker.sh|kind.sh) [[ "${TENURE_KIND_E2E:-0}" != 0 ]] || continue ;;
  esac
  echo "== $(basename "$script")"
  bash "$script"
done
