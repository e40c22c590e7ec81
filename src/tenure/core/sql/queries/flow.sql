-- Flow control (issue 38): per-key running limits of a queue and their status; every change
-- is recorded in flow_changes with who asked. The claim enforces the limits (lease.sql, job_claim).
-- Run by src/tenure/core/repository/flow.py (FlowQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: flow_per_key_set
-- Set (or with NULL remove) a queue's running limit for every flow key, creating its control row; records the change; returns the limit before and after.
WITH before AS (
    SELECT per_key_running FROM {schema}.queues WHERE name = %(queue)s
), upsert AS (
    INSERT INTO {schema}.queues AS q (name, per_key_running, updated_by)
    VALUES (%(queue)s, %(running)s::int, %(requested_by)s)
    ON CONFLICT (name) DO UPDATE
    SET per_key_running = %(running)s::int, updated_by = %(requested_by)s, updated_at = now()
    RETURNING q.name, q.per_key_running
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, queue_name, setting, old_value, new_value)
    SELECT %(requested_by)s, %(queue)s, 'per_key_running', (SELECT per_key_running::text FROM before),
           %(running)s::int::text
), notified AS (
    -- Raising or removing a limit wakes the queue's workers at once.
    SELECT pg_notify(%(channel)s, %(queue)s)
)
SELECT u.name, u.per_key_running, (SELECT per_key_running FROM before) AS old_per_key_running
FROM upsert u WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_key_running_set
-- Set one flow key's running limit in a queue (overriding per_key_running), creating the queue's control row so claims gate on it; records the change; returns the limit before.
WITH before AS (
    SELECT running FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND flow_key = %(key)s
), queue_row AS (
    INSERT INTO {schema}.queues (name, updated_by) VALUES (%(queue)s, %(requested_by)s)
    ON CONFLICT (name) DO NOTHING
), upsert AS (
    INSERT INTO {schema}.flow_keys AS f (queue_name, flow_key, running, updated_by)
    VALUES (%(queue)s, %(key)s, %(running)s::int, %(requested_by)s)
    ON CONFLICT (queue_name, flow_key) DO UPDATE
    SET running = %(running)s::int, updated_by = %(requested_by)s, updated_at = now()
    RETURNING f.running
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, queue_name, flow_key, setting, old_value, new_value)
    SELECT %(requested_by)s, %(queue)s, %(key)s, 'running', (SELECT running::text FROM before), %(running)s::int::text
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s)
)
SELECT (SELECT running FROM upsert) AS running, (SELECT running FROM before) AS old_running
WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_key_running_clear
-- Remove one flow key's own running limit (the queue's per_key_running applies again); records the change when there was one; returns the limit before.
WITH gone AS (
    DELETE FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND flow_key = %(key)s RETURNING running
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, queue_name, flow_key, setting, old_value, new_value)
    SELECT %(requested_by)s, %(queue)s, %(key)s, 'running', running::text, NULL FROM gone
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM gone
)
SELECT (SELECT running FROM gone) AS old_running WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_key_limit_list
-- The flow keys of one queue that have a running limit of their own, with that limit (the flow_keys rows only: no job is read).
SELECT flow_key, running FROM {schema}.flow_keys WHERE queue_name = %(queue)s ORDER BY flow_key;

-- name: flow_queue_list
-- The queues with a flow limit (per_key_running or a key's own), with their keyed running, ready and blocked counts.
WITH limited AS (
    SELECT name FROM {schema}.queues WHERE per_key_running IS NOT NULL
    UNION SELECT DISTINCT queue_name FROM {schema}.flow_keys
)
SELECT l.name AS queue, s.per_key_running, coalesce(s.paused, false) AS paused,
       (SELECT count(*) FROM {schema}.flow_keys f WHERE f.queue_name = l.name)::int AS key_limits
FROM limited l LEFT JOIN {schema}.queues s ON s.name = l.name
ORDER BY l.name;

-- name: flow_key_status
-- Per flow key of one queue (keys with a limit of their own, running jobs or ready jobs): running, limit, ready, blocked (ready beyond the key's room) and the oldest ready job's wait; the busiest first, at most `limit` keys, with the totals of every key (keys, blocked jobs).
WITH running AS (
    SELECT flow_key, count(*)::int AS n FROM {schema}.jobs
    WHERE status = 'running' AND queue_name = %(queue)s AND flow_key IS NOT NULL GROUP BY flow_key
), ready AS (
    SELECT flow_key, count(*)::int AS n, min(available_at) AS oldest FROM {schema}.jobs
    WHERE status = 'pending' AND queue_name = %(queue)s AND flow_key IS NOT NULL AND available_at <= now()
    GROUP BY flow_key
), keys AS (
    SELECT flow_key FROM running UNION SELECT flow_key FROM ready
    UNION SELECT flow_key FROM {schema}.flow_keys WHERE queue_name = %(queue)s
), status AS (
    SELECT k.flow_key, coalesce(r.n, 0) AS running, coalesce(f.running, s.per_key_running) AS running_limit,
           f.running IS NOT NULL AS own_limit, coalesce(d.n, 0) AS ready,
           CASE WHEN coalesce(f.running, s.per_key_running) IS NULL THEN 0
                ELSE greatest(0, coalesce(d.n, 0)
                                 - greatest(0, coalesce(f.running, s.per_key_running) - coalesce(r.n, 0))) END AS blocked,
           greatest(extract(epoch FROM now() - d.oldest)::float8, 0) AS oldest_wait_seconds
    FROM keys k
    LEFT JOIN running r ON r.flow_key = k.flow_key
    LEFT JOIN ready d ON d.flow_key = k.flow_key
    LEFT JOIN {schema}.flow_keys f ON f.queue_name = %(queue)s AND f.flow_key = k.flow_key
    LEFT JOIN {schema}.queues s ON s.name = %(queue)s
)
SELECT flow_key, running, running_limit, own_limit, ready, blocked, oldest_wait_seconds,
       count(*) OVER ()::int AS keys_total, (sum(blocked) OVER ())::bigint AS blocked_total
FROM status
ORDER BY blocked DESC, running DESC, ready DESC, flow_key
LIMIT %(limit)s;

-- name: flow_change_list
-- The latest flow-control changes, newest first (optionally of one queue).
SELECT id, changed_at, changed_by, queue_name, flow_key, setting, old_value, new_value
FROM {schema}.flow_changes
WHERE %(queue)s::text IS NULL OR queue_name = %(queue)s
ORDER BY id DESC
LIMIT %(limit)s;
