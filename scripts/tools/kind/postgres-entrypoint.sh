#!/bin/sh
# PostgreSQL for the registry-free kind path (Debian's postgresql-15). On first start, initialise
# $PGDATA with POSTGRES_USER/POSTGRES_PASSWORD/POSTGRES_DB (like the official image), then run
# postgres in the foreground as user postgres, listening on every address with md5 passwords.
set -eu
: "${PGDATA:=/var/lib/postgresql/data/pgdata}" "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
bin=/usr/lib/postgresql/15/bin
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$(dirname "$PGDATA")" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pw="$(mktemp)"; printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" > "$pw"; chown postgres "$pw"
    runuser -u postgres -- "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" \
        --auth-local=trust --auth-host=md5 >/dev/null
    rm -f "$pw"
    echo "host all all 0.0.0.0/0 md5" >> "$PGDATA/pg_hba.conf"
    runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        runuser -u postgres -- psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres \
            -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
    fi
    runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres-entrypoint: initialised $PGDATA"
fi
exec runuser -u postgres -- "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
