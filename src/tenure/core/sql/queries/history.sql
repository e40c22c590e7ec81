-- Where completed jobs live (migration 0009): job_history's day partitions made ahead of
-- need, the batched move of pre-0009 completed rows, and retention (`tenure prune`): dropping
-- whole partitions, deleting old completed rows outside one and old cancelled jobs.
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

-- name: job_prune_cancelled
-- Delete up to `batch` cancelled jobs cancelled more than `older_than` seconds ago, with their audit events and keys.
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE cancelled_at IS NOT NULL AND status = 'cancelled'
      AND cancelled_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY cancelled_at LIMIT %(batch)s
), deleted AS (
    DELETE FROM {schema}.jobs j USING doomed d WHERE j.id = d.id RETURNING j.id, j.idempotency_key
), events AS (
    DELETE FROM {schema}.job_events e USING deleted d WHERE e.job_id = d.id
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING deleted d WHERE r.job_id = d.id
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: job_prune_completed
-- Delete up to `batch` completed jobs older than `older_than` seconds still in `jobs` (completed before 0009, not moved yet), with their audit events and keys.
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'completed' AND completed_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY completed_at LIMIT %(batch)s
), deleted AS (
    DELETE FROM {schema}.jobs j USING doomed d WHERE j.id = d.id RETURNING j.id, j.idempotency_key
), events AS (
    DELETE FROM {schema}.job_events e USING deleted d WHERE e.job_id = d.id
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: job_history_prune_default
-- Delete up to `batch` jobs of job_history's default partition (completed on a day that had no partition yet) that completed more than `older_than` seconds ago, with their events and keys.
WITH doomed AS (
    SELECT id FROM {schema}.job_history_default
    WHERE completed_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY completed_at LIMIT %(batch)s
), deleted AS (
    DELETE FROM {schema}.job_history_default h USING doomed d WHERE h.id = d.id
    RETURNING h.id, h.idempotency_key
), events AS (
    DELETE FROM {schema}.job_events e USING deleted d WHERE e.job_id = d.id
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
)
SELECT count(*)::int AS deleted FROM deleted;
