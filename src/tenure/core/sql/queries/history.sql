-- Where completed jobs live (migration 0009): job_history's day partitions made ahead of
-- need, the batched move of pre-0009 completed rows, retention by dropping partitions.
-- Run by src/tenure/core/repository/history.py (HistoryQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_history_ensure
-- Create the day partitions of job_history from `days_back` days before today (UTC, by the DB clock) to `days_ahead` after it that are missing; returns how many it created.
SELECT {schema}.job_history_ensure(%(schema)s::text, (now() AT TIME ZONE 'UTC')::date - %(days_back)s::int,
                                   (now() AT TIME ZONE 'UTC')::date + %(days_ahead)s::int) AS created;

-- name: job_history_move_span
-- The next batch of completed jobs still in `jobs` (completed before 0009) after `after_id`, in id order: its last id and the first and last UTC day of its completions (no row: none left).
SELECT max(id) AS last_id, (min(completed_at) AT TIME ZONE 'UTC')::date AS first_day,
       (max(completed_at) AT TIME ZONE 'UTC')::date AS last_day
FROM (SELECT id, completed_at FROM {schema}.jobs
      WHERE status = 'completed' AND id > %(after_id)s::bigint ORDER BY id LIMIT %(batch)s) b
HAVING count(*) > 0;

-- name: job_history_ensure_days
-- Create the day partitions of job_history from `first_day` to `last_day` (UTC) that are missing; returns how many it created.
SELECT {schema}.job_history_ensure(%(schema)s::text, %(first_day)s::date, %(last_day)s::date) AS created;

-- name: job_history_move_batch
-- Move the completed jobs still in `jobs` with ids in (`after_id`, `last_id`] into job_history, with their keys; returns how many moved.
WITH moved AS (
    DELETE FROM {schema}.jobs j
    WHERE j.status = 'completed' AND j.id > %(after_id)s::bigint AND j.id <= %(last_id)s::bigint
    RETURNING j.*
), keys AS (
    INSERT INTO {schema}.job_keys (idempotency_key, created_at)
    SELECT idempotency_key, created_at FROM moved WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING
), archived AS (
    INSERT INTO {schema}.job_history SELECT * FROM moved RETURNING 1
)
SELECT count(*)::int AS moved FROM archived;

-- name: job_history_drop_oldest
-- Drop the oldest day partition of job_history that ended more than `older_than` seconds ago, with its jobs' events and keys; `jobs` is how many it held (NULL: none that old).
SELECT {schema}.job_history_drop_oldest(%(schema)s::text, now() - make_interval(secs => %(older_than)s)) AS jobs;

-- name: job_history_partition_list
-- The day partitions of job_history (and the default one) with their row estimates, oldest first.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bounds, c.reltuples::bigint AS estimated_rows
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = '{schema}.job_history'::regclass
ORDER BY c.relname;
