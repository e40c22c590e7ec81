-- Enqueue: one job or a batch; the idempotency key is claimed in job_keys first (R13), and
-- an enqueue works inside the caller's transaction (R17).
-- Run by src/tenure/core/repository/enqueue.py (EnqueueQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_enqueue
-- Insert one job; with an idempotency key, return the existing job (hot or in history) instead of a copy (R13).
-- The key is claimed in job_keys first: it outlives the job's move to history, and two racing
-- enqueues of one key serialise on its primary key. The jobs index still guards keys of jobs
-- enqueued by a tenure older than 0009 (not in job_keys until they move).
WITH key AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT %(idempotency_key)s::text WHERE %(idempotency_key)s::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, payload_version, max_attempts,
                               available_at, idempotency_key, correlation_id, priority, trace_context, flow_key,
                               rate_limit, rate_units)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(payload_version)s, %(max_attempts)s,
           now() + make_interval(secs => %(delay)s), %(idempotency_key)s, %(correlation_id)s,
           %(priority)s, %(trace_context)s, %(flow_key)s, %(rate_limit)s, %(rate_units)s
    WHERE %(idempotency_key)s::text IS NULL OR EXISTS (SELECT 1 FROM key)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM ins
)
SELECT id, true AS created FROM ins WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT j.id, false AS created FROM {schema}.all_jobs j
WHERE j.idempotency_key = %(idempotency_key)s AND NOT EXISTS (SELECT 1 FROM ins);

-- name: job_enqueue_unique
-- Insert one job with a unique key (docs/unique.md), or return the job holding its idempotency key or its unique key (source says which).
-- The key is the caller's hash, then '@' and the start of the period's bucket by the database
-- clock. ON CONFLICT DO NOTHING arbitrates on every unique index: a job holding the unique key
-- (jobs_unique_key_idx, in its covered states) or a key of an older tenure. No row: a racing
-- holder committed after this statement's snapshot (look again).
WITH k AS (
    SELECT %(unique_base)s::text || CASE WHEN %(unique_period)s::bigint IS NULL THEN ''
        ELSE '@' || (floor(extract(epoch FROM now()) / %(unique_period)s::bigint)::bigint * %(unique_period)s::bigint)::text
        END AS unique_key
), key AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT %(idempotency_key)s::text WHERE %(idempotency_key)s::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, payload_version, max_attempts,
                               available_at, idempotency_key, correlation_id, priority, trace_context, flow_key,
                               rate_limit, rate_units, unique_key, unique_states)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(payload_version)s, %(max_attempts)s,
           now() + make_interval(secs => %(delay)s), %(idempotency_key)s, %(correlation_id)s,
           %(priority)s, %(trace_context)s, %(flow_key)s, %(rate_limit)s, %(rate_units)s,
           k.unique_key, %(unique_states)s::text[]::{schema}.job_status[]
    FROM k
    WHERE %(idempotency_key)s::text IS NULL OR EXISTS (SELECT 1 FROM key)
    ON CONFLICT DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM ins
), existing AS (
    SELECT j.id, 'key' AS source, 1 AS rank FROM {schema}.all_jobs j
    WHERE j.idempotency_key = %(idempotency_key)s
    UNION ALL
    SELECT j.id, 'unique', 2 FROM {schema}.jobs j, k
    WHERE j.unique_key = k.unique_key AND j.status = ANY (j.unique_states)
)
SELECT id, true AS created, false AS replaced, 'new' AS source FROM ins WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
(SELECT id, false, false, source FROM existing WHERE NOT EXISTS (SELECT 1 FROM ins) ORDER BY rank LIMIT 1);

-- name: job_enqueue_unique_update
-- Insert one job with a unique key, or (replace, debounce) put its payload, and with debounce its start, into the pending job holding the key; returns the job and whether it was new or rewritten.
-- The conflict is arbitrated by jobs_unique_key_idx and the holder's row locked (to the end of
-- the transaction). A holder that is not pending is left as it is and returned (source
-- 'unique'); a held idempotency key returns its job (source 'key'). No row: look again.
WITH k AS (
    SELECT %(unique_base)s::text || CASE WHEN %(unique_period)s::bigint IS NULL THEN ''
        ELSE '@' || (floor(extract(epoch FROM now()) / %(unique_period)s::bigint)::bigint * %(unique_period)s::bigint)::text
        END AS unique_key
), key AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT %(idempotency_key)s::text WHERE %(idempotency_key)s::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs AS j (queue_name, task, payload, payload_version, max_attempts,
                                    available_at, idempotency_key, correlation_id, priority, trace_context, flow_key,
                                    rate_limit, rate_units, unique_key, unique_states)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(payload_version)s, %(max_attempts)s,
           now() + make_interval(secs => %(delay)s), %(idempotency_key)s, %(correlation_id)s,
           %(priority)s, %(trace_context)s, %(flow_key)s, %(rate_limit)s, %(rate_units)s,
           k.unique_key, %(unique_states)s::text[]::{schema}.job_status[]
    FROM k
    WHERE %(idempotency_key)s::text IS NULL OR EXISTS (SELECT 1 FROM key)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status = ANY (unique_states)
    DO UPDATE SET payload = EXCLUDED.payload, payload_version = EXCLUDED.payload_version,
                  available_at = CASE WHEN %(debounce)s THEN EXCLUDED.available_at ELSE j.available_at END,
                  updated_at = now()
    WHERE j.status = 'pending'
    RETURNING j.id, (j.xmax = 0) AS created
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM ins WHERE created
), existing AS (
    SELECT j.id, 'key' AS source, 1 AS rank FROM {schema}.all_jobs j
    WHERE j.idempotency_key = %(idempotency_key)s
    UNION ALL
    SELECT j.id, 'unique', 2 FROM {schema}.jobs j, k
    WHERE j.unique_key = k.unique_key AND j.status = ANY (j.unique_states)
)
SELECT id, created, NOT created AS replaced, CASE WHEN created THEN 'new' ELSE 'unique' END AS source
FROM ins WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
(SELECT id, false, false, source FROM existing WHERE NOT EXISTS (SELECT 1 FROM ins) ORDER BY rank LIMIT 1);

-- name: job_key_release_orphans
-- Forget the given idempotency keys that no job holds (claimed by an enqueue whose job a unique key skipped); returns the keys forgotten.
DELETE FROM {schema}.job_keys k
WHERE k.idempotency_key = ANY(%(keys)s::text[])
  AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs j WHERE j.idempotency_key = k.idempotency_key)
RETURNING k.idempotency_key;

-- name: job_key_release_orphan
-- Forget an idempotency key that no job holds any more (its job deleted outside tenure's statements); returns it when it was forgotten.
DELETE FROM {schema}.job_keys k
WHERE k.idempotency_key = %(key)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs j WHERE j.idempotency_key = %(key)s)
RETURNING k.idempotency_key;

-- name: job_enqueue_many
-- Insert a batch of jobs in one statement (arrays, one element per job); duplicates by key are skipped; the new jobs' trace contexts and ids (traced batches name each job id on its span).
-- A job with a unique key (unique_bases[i] not NULL) is skipped when a job holds it (skip; the
-- replace and debounce entries go one by one through job_enqueue_unique_update); DO NOTHING
-- arbitrates on every unique index, idempotency and unique keys alike. Jobs with a unique key
-- are inserted after the others, in key order: two batches racing on keys then wait for each
-- other in one order, never in a circle (a deadlock); their ids follow key order, not batch order.
WITH input AS (
    SELECT * FROM unnest(%(queues)s::text[], %(tasks)s::text[], %(payloads)s::text[]::jsonb[],
                         %(max_attempts)s::int[], %(delays)s::float8[], %(idempotency_keys)s::text[],
                         %(priorities)s::smallint[], %(trace_contexts)s::text[], %(flow_keys)s::text[],
                         %(rate_limits)s::text[], %(rate_units)s::int[], %(unique_bases)s::text[],
                         %(unique_periods)s::bigint[], %(unique_states)s::text[])
                  WITH ORDINALITY AS t(queue_name, task, payload, max_attempts, delay, idempotency_key, priority,
                                       trace_context, flow_key, rate_limit, rate_units, unique_base, unique_period,
                                       unique_states, ord)
), keys AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT DISTINCT idempotency_key FROM input WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, available_at, idempotency_key, priority,
                               trace_context, flow_key, rate_limit, rate_units, unique_key, unique_states)
    SELECT queue_name, task, payload, max_attempts, now() + make_interval(secs => delay), idempotency_key, priority,
           trace_context, flow_key, rate_limit, rate_units,
           unique_base || CASE WHEN unique_period IS NULL THEN ''
               ELSE '@' || (floor(extract(epoch FROM now()) / unique_period)::bigint * unique_period)::text END,
           string_to_array(unique_states, ',')::{schema}.job_status[]
    FROM input WHERE idempotency_key IS NULL OR idempotency_key IN (SELECT idempotency_key FROM keys)
    ORDER BY unique_base NULLS FIRST, unique_period, ord
    ON CONFLICT DO NOTHING
    RETURNING id, queue_name, trace_context
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM ins) d
)
SELECT count(*)::int AS inserted,
       array_agg(id) FILTER (WHERE trace_context IS NOT NULL) AS traced_ids,
       array_agg(trace_context) FILTER (WHERE trace_context IS NOT NULL) AS traced_contexts
FROM ins WHERE (SELECT count(*) FROM notified) >= 0;

-- name: job_rate_limit_list
-- The rate limits among the given names, with their bursts: enqueue refuses a job naming an unknown one, or more units than its burst.
SELECT name, burst FROM {schema}.rate_limits WHERE name = ANY(%(names)s::text[]);
