-- Schema: migrations (the advisory lock, the version table, each migration's record), the
-- claim statistics a starting worker refreshes (ANALYZE) and the hot table's vacuum.
-- Run by src/tenure/core/repository/schema.py (SchemaQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: migration_table_exists
-- Whether the migrations table exists yet (an empty schema has none).
SELECT to_regclass(%(table)s) IS NOT NULL AS present;

-- name: migration_version
-- The highest applied migration.
SELECT coalesce(max(version), 0) AS version FROM {schema}.schema_migrations;

-- name: job_table_stats_stale
-- Whether the planner's statistics of the jobs table lag far behind it (a bulk enqueue since the last analyze): the claim's plan depends on them.
SELECT coalesce(s.n_mod_since_analyze >= %(min_rows)s
                AND s.n_mod_since_analyze >= %(fraction)s * greatest(c.reltuples, 0), false) AS stale
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = '{schema}.jobs'::regclass;

-- name: job_table_analyze_lock
-- Serialise starting workers' analyses of one schema's jobs table (waiting at most 200 ms, this transaction only), and forget the statistics snapshot read before the wait.
WITH timeout AS MATERIALIZED (SELECT set_config('lock_timeout', '200ms', true))
SELECT pg_advisory_xact_lock(hashtext('tenure-analyze:' || %(schema)s)), pg_stat_clear_snapshot() FROM timeout;

-- name: job_table_analyze
-- Refresh the jobs table's planner statistics, waiting at most 200 ms for a vacuum or analyze already running (after job_table_analyze_lock, in its transaction).
ANALYZE {schema}.jobs;

-- name: job_table_dead_rows
-- The jobs table's dead and live row counts (cumulative statistics, at most a second behind) and whether this role may vacuum it (its owner, a member of the owner's role, or a superuser).
SELECT coalesce(s.n_dead_tup, 0)::bigint AS dead, coalesce(s.n_live_tup, 0)::bigint AS live,
       pg_has_role(c.relowner, 'USAGE') AS may_vacuum
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = '{schema}.jobs'::regclass;

-- name: job_table_vacuum_lock
-- Take the one-vacuumer-per-schema session lock without waiting; `taken` says whether it was.
SELECT pg_try_advisory_lock(hashtext('tenure-vacuum:' || %(schema)s)) AS taken;

-- name: job_table_vacuum
-- Vacuum the hot table now, dead index entries included, never waiting for a lock (another vacuum of it: skipped) and never truncating (its brief exclusive lock would queue the claims); autocommit only.
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) {schema}.jobs;

-- name: job_table_vacuum_unlock
-- Release the session lock job_table_vacuum_lock took.
SELECT pg_advisory_unlock(hashtext('tenure-vacuum:' || %(schema)s)) AS released;

-- name: migration_lock
-- Serialise concurrent `tenure migrate` runs on one schema (transaction-scoped advisory lock).
SELECT pg_advisory_xact_lock(hashtext('tenure-migrate:' || %(schema)s));

-- name: migration_schema_create
-- Create the schema that holds every tenure object, if missing.
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: migration_search_path
-- Point unqualified names in a migration file at the schema (this transaction only).
SET LOCAL search_path TO {schema};

-- name: migration_record
-- Record one applied migration.
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s);
