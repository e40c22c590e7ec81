-- Flow control (issue 38): per-key running limits of a queue, flow keys' weights, named rate
-- limits, and their status; every change is recorded in flow_changes with who asked (a rate
-- limit's with queue_name NULL and rate_limit = its name). The claim enforces them (claim.sql).
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
-- Remove one flow key's own running limit (the queue's per_key_running applies again): the key's row goes unless it carries a weight; records the change when there was one; returns the limit before.
WITH before AS (
    SELECT running FROM {schema}.flow_keys
    WHERE queue_name = %(queue)s AND flow_key = %(key)s AND running IS NOT NULL
), gone AS (
    DELETE FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND flow_key = %(key)s AND weight = 1
), kept AS (
    UPDATE {schema}.flow_keys SET running = NULL, updated_by = %(requested_by)s, updated_at = now()
    WHERE queue_name = %(queue)s AND flow_key = %(key)s AND weight <> 1 AND running IS NOT NULL
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, queue_name, flow_key, setting, old_value, new_value)
    SELECT %(requested_by)s, %(queue)s, %(key)s, 'running', running::text, NULL FROM before
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM before
)
SELECT (SELECT running FROM before) AS old_running WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_key_weight_set
-- Set one flow key's fairness weight in a queue (other than 1), keeping its running limit; records the change; returns the weight before (1 without one).
WITH before AS (
    SELECT weight FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND flow_key = %(key)s
), upsert AS (
    INSERT INTO {schema}.flow_keys AS f (queue_name, flow_key, running, weight, updated_by)
    VALUES (%(queue)s, %(key)s, NULL, %(weight)s::float8, %(requested_by)s)
    ON CONFLICT (queue_name, flow_key) DO UPDATE
    SET weight = %(weight)s::float8, deficit = least(f.deficit, %(weight)s::float8),
        updated_by = %(requested_by)s, updated_at = now()
    RETURNING f.weight
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, queue_name, flow_key, setting, old_value, new_value)
    SELECT %(requested_by)s, %(queue)s, %(key)s, 'weight', coalesce((SELECT weight FROM before), 1)::text,
           %(weight)s::float8::text
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s)
)
SELECT (SELECT weight FROM upsert) AS weight, coalesce((SELECT weight FROM before), 1) AS old_weight
WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_key_weight_clear
-- Put one flow key's weight back to 1: the key's row goes unless it carries a running limit; records the change when there was one; returns the weight before.
WITH before AS (
    SELECT weight FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND flow_key = %(key)s AND weight <> 1
), gone AS (
    DELETE FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND flow_key = %(key)s AND running IS NULL
), kept AS (
    UPDATE {schema}.flow_keys SET weight = 1, deficit = 0, updated_by = %(requested_by)s, updated_at = now()
    WHERE queue_name = %(queue)s AND flow_key = %(key)s AND running IS NOT NULL AND weight <> 1
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, queue_name, flow_key, setting, old_value, new_value)
    SELECT %(requested_by)s, %(queue)s, %(key)s, 'weight', weight::text, '1' FROM before
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM before
)
SELECT coalesce((SELECT weight FROM before), 1) AS old_weight WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_key_limit_list
-- The flow keys of one queue that have a running limit of their own, with that limit (the flow_keys rows only: no job is read).
SELECT flow_key, running FROM {schema}.flow_keys WHERE queue_name = %(queue)s AND running IS NOT NULL ORDER BY flow_key;

-- name: flow_key_setting_list
-- The flow_keys rows of one queue: each key's own running limit (NULL: none) and weight (no job is read; the operator's read of spec.flow).
SELECT flow_key, running, weight FROM {schema}.flow_keys WHERE queue_name = %(queue)s ORDER BY flow_key;

-- name: flow_rate_setting_list
-- The rate limits named in `names` or last set by `owner`, with their settings and who set them last (the rate_limits rows only: no bucket is read).
SELECT name, per_second, burst, per_key, updated_by FROM {schema}.rate_limits
WHERE name = ANY(%(names)s::text[]) OR updated_by = %(owner)s
ORDER BY name;

-- name: flow_queue_list
-- The queues with a flow setting (per_key_running, or a key's own running limit or weight), with how many keys have a limit or a weight of their own.
WITH limited AS (
    SELECT name FROM {schema}.queues WHERE per_key_running IS NOT NULL
    UNION SELECT DISTINCT queue_name FROM {schema}.flow_keys
)
SELECT l.name AS queue, s.per_key_running, coalesce(s.paused, false) AS paused,
       (SELECT count(*) FROM {schema}.flow_keys f WHERE f.queue_name = l.name AND f.running IS NOT NULL)::int
           AS key_limits,
       (SELECT count(*) FROM {schema}.flow_keys f WHERE f.queue_name = l.name AND f.weight <> 1)::int AS key_weights
FROM limited l LEFT JOIN {schema}.queues s ON s.name = l.name
ORDER BY l.name;

-- name: flow_key_status
-- Per flow key of one queue (keys with a limit or weight of their own, running jobs or ready jobs): running, limit, weight, ready, blocked (ready beyond the key's room) and the oldest ready job's wait; the busiest first, at most `limit` keys, with the totals of every key (keys, blocked jobs).
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
           f.running IS NOT NULL AS own_limit, coalesce(f.weight, 1) AS weight, coalesce(d.n, 0) AS ready,
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
SELECT flow_key, running, running_limit, own_limit, weight, ready, blocked, oldest_wait_seconds,
       count(*) OVER ()::int AS keys_total, (sum(blocked) OVER ())::bigint AS blocked_total
FROM status
ORDER BY blocked DESC, running DESC, ready DESC, flow_key
LIMIT %(limit)s;

-- name: flow_change_list
-- The latest flow-control changes, newest first (optionally of one queue); a rate limit's changes have queue_name NULL and rate_limit set.
SELECT id, changed_at, changed_by, queue_name, flow_key, rate_limit, setting, old_value, new_value
FROM {schema}.flow_changes
WHERE %(queue)s::text IS NULL OR queue_name = %(queue)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: flow_rate_set
-- Create or change a named rate limit (a token bucket shared by every job naming it); a change of per_key drops its buckets (each starts full again); records each setting that changed and wakes the queues with jobs naming it; returns the limit before and after.
WITH before AS (
    SELECT per_second, burst, per_key FROM {schema}.rate_limits WHERE name = %(name)s
), upsert AS (
    INSERT INTO {schema}.rate_limits AS l (name, per_second, burst, per_key, updated_by)
    VALUES (%(name)s, %(per_second)s::float8, %(burst)s::int, %(per_key)s::boolean, %(requested_by)s)
    ON CONFLICT (name) DO UPDATE
    SET per_second = %(per_second)s::float8, burst = %(burst)s::int, per_key = %(per_key)s::boolean,
        updated_by = %(requested_by)s, updated_at = now()
    RETURNING l.name, l.per_second, l.burst, l.per_key
), reset AS (
    DELETE FROM {schema}.rate_buckets b
    WHERE b.limit_name = %(name)s AND EXISTS (SELECT 1 FROM before WHERE per_key <> %(per_key)s::boolean)
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, rate_limit, setting, old_value, new_value)
    SELECT %(requested_by)s, %(name)s, c.setting, c.old_value, c.new_value
    FROM (VALUES ('per_second', (SELECT per_second::text FROM before), %(per_second)s::float8::text, 1),
                 ('burst', (SELECT burst::text FROM before), %(burst)s::int::text, 2),
                 ('per_key', (SELECT per_key::text FROM before), %(per_key)s::boolean::text, 3))
         AS c(setting, old_value, new_value, n)
    WHERE c.old_value IS DISTINCT FROM c.new_value
    ORDER BY c.n
), notified AS (
    SELECT pg_notify(%(channel)s, w.queue_name)
    FROM (SELECT DISTINCT queue_name FROM {schema}.jobs WHERE status = 'pending' AND rate_limit = %(name)s) w
)
SELECT u.name, u.per_second, u.burst, u.per_key,
       b.per_second AS old_per_second, b.burst AS old_burst, b.per_key AS old_per_key
FROM upsert u LEFT JOIN before b ON true
WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_rate_delete
-- Delete a named rate limit and its buckets (jobs still naming it are no longer limited by it); records each of its settings as removed and wakes the queues with jobs naming it; returns it when there was one.
WITH gone AS (
    DELETE FROM {schema}.rate_limits WHERE name = %(name)s RETURNING name, per_second, burst, per_key
), audit AS (
    INSERT INTO {schema}.flow_changes (changed_by, rate_limit, setting, old_value, new_value)
    SELECT %(requested_by)s, g.name, c.setting, c.old_value, NULL
    FROM gone g, LATERAL (VALUES ('per_second', g.per_second::text, 1), ('burst', g.burst::text, 2),
                                 ('per_key', g.per_key::text, 3)) AS c(setting, old_value, n)
    ORDER BY c.n
), notified AS (
    SELECT pg_notify(%(channel)s, w.queue_name)
    FROM (SELECT DISTINCT queue_name FROM {schema}.jobs
          WHERE status = 'pending' AND rate_limit = %(name)s AND EXISTS (SELECT 1 FROM gone)) w
)
SELECT name, per_second, burst, per_key FROM gone WHERE (SELECT count(*) FROM notified) >= 0;

-- name: flow_rate_list
-- Every named rate limit with its buckets now (by the database clock): how many, the tokens of the shared bucket or the fewest of a per-key limit's buckets (a limit without a bucket yet is full), how many are paused and until when.
WITH now_tokens AS (
    SELECT b.limit_name, b.paused_until > now() AS paused, b.paused_until,
           CASE WHEN b.paused_until > now() THEN 0::float8
                ELSE least(l.burst, b.tokens + l.per_second
                                    * greatest(0, extract(epoch FROM now() - b.refilled_at)::float8)) END AS tokens
    FROM {schema}.rate_buckets b JOIN {schema}.rate_limits l ON l.name = b.limit_name
    WHERE b.flow_key = '' OR l.per_key
)
SELECT l.name, l.per_second, l.burst, l.per_key, l.updated_by, l.updated_at,
       count(t.limit_name)::int AS buckets,
       coalesce(min(t.tokens), l.burst::float8) AS tokens,
       (count(*) FILTER (WHERE t.paused))::int AS paused_buckets,
       max(t.paused_until) FILTER (WHERE t.paused) AS paused_until
FROM {schema}.rate_limits l LEFT JOIN now_tokens t ON t.limit_name = l.name
GROUP BY l.name
ORDER BY l.name;
