#!/usr/bin/env bash
# Runs every tool installer in this folder (each is idempotent and caches outside the repo).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for script in "$here"/*.sh; do
  case "$(basename "$script")" in all.sh|env.sh) continue ;; esac
  echo "== $(basename "$script")"
  bash "$script"
done
