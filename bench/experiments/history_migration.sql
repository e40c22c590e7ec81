-- Named statements of bench/experiments/history_migration.py (same format as src/tenure/core/sql/queries/*.sql).
-- `{schema}` is replaced by the quoted schema name. The seed itself is bench/experiments/ui_scale.sql's.

-- name: schema_version
-- The schema's migration version (0: none).
SELECT coalesce(max(version), 0)::int AS version FROM {schema}.schema_migrations;

-- name: keys_snapshot
-- Remember every idempotency key the installation holds before the upgrade (checked against job_keys at the end).
CREATE TABLE public.bench_history_keys_before AS
SELECT idempotency_key FROM {schema}.jobs WHERE idempotency_key IS NOT NULL;

-- name: status_counts
-- Jobs per status in the hot table.
SELECT status::text AS status, count(*)::bigint AS n FROM {schema}.jobs GROUP BY status ORDER BY status;

-- name: completed_sample
-- Completed jobs to look at with `tenure jobs show` after the move, with an audit trail (the seed gives one to every fifth job): the oldest, and one past the middle.
(SELECT id FROM {schema}.jobs WHERE status = 'completed' AND id %% 5 = 0 ORDER BY id LIMIT 1)
UNION ALL
(SELECT id FROM {schema}.jobs WHERE status = 'completed' AND id %% 5 = 0 AND id > %(total)s::bigint / 2 ORDER BY id LIMIT 1);

-- name: workload_left
-- The workload's jobs not finished yet (pending or running in its queue).
SELECT count(*)::bigint AS n FROM {schema}.jobs WHERE queue_name = %(queue)s AND status IN ('pending', 'running');

-- name: totals_after
-- Where every job is after the move: hot rows, history rows, completed rows left hot, rows in the default partition.
SELECT (SELECT count(*) FROM {schema}.jobs)::bigint AS hot,
       (SELECT count(*) FROM {schema}.job_history)::bigint AS history,
       (SELECT count(*) FROM {schema}.jobs WHERE status = 'completed')::bigint AS completed_hot,
       (SELECT count(*) FROM {schema}.job_history_default)::bigint AS in_default,
       (SELECT count(*) FROM {schema}.job_keys)::bigint AS keys;

-- name: keys_missing
-- Keys held before the upgrade that job_keys does not know (must be none).
SELECT count(*)::bigint AS n FROM public.bench_history_keys_before b
WHERE NOT EXISTS (SELECT 1 FROM {schema}.job_keys k WHERE k.idempotency_key = b.idempotency_key);

-- name: workload_counts
-- The workload's jobs per status wherever they live, and how many of their keys job_keys lacks.
SELECT j.status::text AS status, count(*)::bigint AS n,
       count(*) FILTER (WHERE j.idempotency_key IS NOT NULL)::bigint AS keyed,
       count(*) FILTER (WHERE j.idempotency_key IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM {schema}.job_keys k WHERE k.idempotency_key = j.idempotency_key))::bigint AS keys_missing
FROM {schema}.all_jobs j WHERE j.queue_name = %(queue)s GROUP BY j.status ORDER BY j.status;

-- name: partition_count
-- How many partitions job_history has (day partitions and the default one).
SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = '{schema}.job_history'::regclass;

-- name: database_size
-- The current database's size on disk.
SELECT pg_database_size(current_database())::bigint AS bytes;

-- name: seed_done
-- Whether a finished seed of `total` jobs is in the schema (bench/experiments/ui_seed.py's record), and its schema version.
SELECT (SELECT done AND total = %(total)s::bigint FROM {schema}.bench_ui_seed) AS done,
       (SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations)::int AS version;
