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

-- name: job_key_release_orphan
-- Forget an idempotency key that no job holds any more (its job deleted outside tenure's statements); returns it when it was forgotten.
DELETE FROM {schema}.job_keys k
WHERE k.idempotency_key = %(key)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs j WHERE j.idempotency_key = %(key)s)
RETURNING k.idempotency_key;

-- name: job_enqueue_many
-- Insert a batch of jobs in one statement (arrays, one element per job); duplicates by key are skipped; the new jobs' trace contexts and ids (traced batches name each job id on its span).
WITH input AS (
    SELECT * FROM unnest(%(queues)s::text[], %(tasks)s::text[], %(payloads)s::text[]::jsonb[],
                         %(max_attempts)s::int[], %(delays)s::float8[], %(idempotency_keys)s::text[],
                         %(priorities)s::smallint[], %(trace_contexts)s::text[], %(flow_keys)s::text[],
                         %(rate_limits)s::text[], %(rate_units)s::int[])
                  WITH ORDINALITY AS t(queue_name, task, payload, max_attempts, delay, idempotency_key, priority,
                                       trace_context, flow_key, rate_limit, rate_units, ord)
), keys AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT DISTINCT idempotency_key FROM input WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, available_at, idempotency_key, priority,
                               trace_context, flow_key, rate_limit, rate_units)
    SELECT queue_name, task, payload, max_attempts, now() + make_interval(secs => delay), idempotency_key, priority,
           trace_context, flow_key, rate_limit, rate_units
    FROM input WHERE idempotency_key IS NULL OR idempotency_key IN (SELECT idempotency_key FROM keys)
    ORDER BY ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
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
