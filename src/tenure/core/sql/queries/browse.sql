-- Job listings: the job browser of `tenure ui` (issue 24) and `tenure jobs list` share one
-- filter, the fragment job_browse_filter, spliced into a page, the ids of a bulk action, a
-- bounded count, the planner's estimate and the CLI's listing (job_list); also the UI's queue
-- figures of the last hour, periodic schedules and the change feed. All run unprepared.
-- Run by src/tenure/core/repository/browse.py (BrowseQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_browse_filter
-- The job filter of the browser and `tenure jobs list`, a fragment spliced into the job_browse queries and job_list where they say {job_browse_filter}; every condition is off when its parameter is NULL.
    (%(id)s::bigint IS NULL OR j.id = %(id)s::bigint)
    AND (%(queue)s::text IS NULL OR j.queue_name = %(queue)s::text)
    -- One literal per status: a text parameter cast to the enum is not folded into a constant at
    -- plan time, so `status = $1::text::job_status` matches no partial index (a page of running
    -- jobs walked the whole primary key); the literals fold away but the one asked for.
    AND (%(status)s::text IS NULL
         OR (%(status)s::text = 'pending' AND j.status = 'pending'::{schema}.job_status)
         OR (%(status)s::text = 'running' AND j.status = 'running'::{schema}.job_status)
         OR (%(status)s::text = 'completed' AND j.status = 'completed'::{schema}.job_status)
         OR (%(status)s::text = 'failed' AND j.status = 'failed'::{schema}.job_status)
         OR (%(status)s::text = 'cancelled' AND j.status = 'cancelled'::{schema}.job_status))
    AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
    AND (%(priority_min)s::int IS NULL OR j.priority >= %(priority_min)s::int)
    AND (%(priority_max)s::int IS NULL OR j.priority <= %(priority_max)s::int)
    AND (%(created_after)s::timestamptz IS NULL OR j.created_at >= %(created_after)s::timestamptz)
    AND (%(created_within)s::float8 IS NULL OR j.created_at >= now() - make_interval(secs => %(created_within)s::float8))
    -- Finished: completed_at is set only on completed jobs, failed_at only while failed,
    -- cancelled_at only while cancelled, so this is coalesce(...) >= t, written so each part is
    -- a range scan of its status's partial index (jobs_completed_idx, jobs_failed_idx,
    -- jobs_cancelled_idx) when few jobs match, instead of a walk of the primary key.
    AND (%(finished_after)s::timestamptz IS NULL
         OR (j.status = 'completed' AND j.completed_at >= %(finished_after)s::timestamptz)
         OR (j.status = 'failed' AND j.failed_at >= %(finished_after)s::timestamptz)
         OR j.cancelled_at >= %(finished_after)s::timestamptz)
    AND (%(finished_within)s::float8 IS NULL
         OR (j.status = 'completed' AND j.completed_at >= now() - make_interval(secs => %(finished_within)s::float8))
         OR (j.status = 'failed' AND j.failed_at >= now() - make_interval(secs => %(finished_within)s::float8))
         OR j.cancelled_at >= now() - make_interval(secs => %(finished_within)s::float8))
    AND (%(idempotency_key)s::text IS NULL OR j.idempotency_key = %(idempotency_key)s::text)
    -- Exact: a range scan of jobs_flow_key_id_idx / job_history_flow_key_id_idx (flow_key, id),
    -- which also hands the rows over in id order for the keyset pages (0011).
    AND (%(flow_key)s::text IS NULL OR j.flow_key = %(flow_key)s::text)
    -- Containment as two arms: the payload index leaves running rows out (0010), so a BitmapOr
    -- reads the other rows through it and the running ones (few) through their own index.
    AND (%(payload)s::jsonb IS NULL
         OR (j.status <> 'running' AND j.payload @> %(payload)s::jsonb)
         OR (j.status = 'running' AND j.payload @> %(payload)s::jsonb))

-- name: job_browse
-- One page of the job browser, newest first (keyset on id: pass the last id seen as before_id), filtered by job_browse_filter.
SELECT j.id, j.queue_name, j.task, j.status::text AS status, j.priority, j.attempt_count, j.max_attempts,
       j.lease_expiry_count, j.fence, j.available_at, j.created_at, j.started_at, j.completed_at, j.failed_at,
       j.cancelled_at, coalesce(j.completed_at, j.failed_at, j.cancelled_at) AS finished_at, j.locked_by,
       j.lease_expires_at, j.last_error_code, j.idempotency_key, j.flow_key, j.payload
FROM {schema}.all_jobs j
WHERE (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
  AND {job_browse_filter}
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: job_list
-- `tenure jobs list`: jobs newest first (keyset paging on id: pass the last id seen as before_id), filtered by job_browse_filter and by failed_since (a failed attempt within that many seconds).
SELECT j.id, j.queue_name, j.task, j.status::text AS status, j.priority, j.attempt_count, j.max_attempts,
       j.available_at, j.created_at, j.started_at, j.completed_at, j.failed_at, j.cancelled_at, j.locked_by,
       j.last_error_code, j.idempotency_key, j.flow_key
FROM {schema}.all_jobs j
WHERE (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
  AND {job_browse_filter}
  AND (%(failed_since)s::float8 IS NULL OR j.last_failed_at >= now() - make_interval(secs => %(failed_since)s::float8))
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: job_browse_ids
-- The ids of the jobs matching job_browse_filter in a given status set, oldest first after after_id: the batches of a bulk action (one page of ids per call).
SELECT j.id FROM {schema}.all_jobs j
WHERE j.id > %(after_id)s::bigint
  AND (('pending' = ANY(%(statuses)s::text[]) AND j.status = 'pending'::{schema}.job_status)
       OR ('running' = ANY(%(statuses)s::text[]) AND j.status = 'running'::{schema}.job_status)
       OR ('completed' = ANY(%(statuses)s::text[]) AND j.status = 'completed'::{schema}.job_status)
       OR ('failed' = ANY(%(statuses)s::text[]) AND j.status = 'failed'::{schema}.job_status)
       OR ('cancelled' = ANY(%(statuses)s::text[]) AND j.status = 'cancelled'::{schema}.job_status))
  AND {job_browse_filter}
ORDER BY j.id
LIMIT %(limit)s;

-- name: db_statement_timeout_set
-- Bound the statements of the current transaction (a count that may not run long); the value is a duration such as 250ms.
SELECT set_config('statement_timeout', %(value)s::text, true);

-- name: job_browse_count
-- How many jobs match job_browse_filter, counting at most `cap` of them (the caller labels a capped count an estimate).
SELECT count(*)::bigint AS n FROM (
    SELECT 1 FROM {schema}.all_jobs j WHERE {job_browse_filter} LIMIT %(cap)s
) matched;

-- name: job_browse_estimate
-- The planner's estimate of how many jobs match job_browse_filter, from EXPLAIN without running the query.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {schema}.all_jobs j WHERE {job_browse_filter};

-- name: queue_throughput_hour
-- Per queue, jobs completed and dead-lettered, and attempts that failed, within the last hour (range scans of the status indexes and the events' BRIN index).
WITH done AS (
    SELECT queue_name, count(*)::bigint AS completed FROM {schema}.all_jobs
    WHERE status = 'completed' AND completed_at > now() - interval '1 hour' GROUP BY queue_name
), dead AS (
    SELECT queue_name, count(*)::bigint AS dead_lettered FROM {schema}.jobs
    WHERE status = 'failed' AND failed_at > now() - interval '1 hour' GROUP BY queue_name
), failed AS (
    SELECT queue_name, count(*)::bigint AS failed_attempts FROM {schema}.job_events
    WHERE created_at > now() - interval '1 hour'
      AND event IN ('retry_scheduled', 'dead_lettered', 'reaped_due_to_expired_lease', 'reaped_to_dead_letter')
    GROUP BY queue_name
), oldest AS (
    SELECT queue_name, extract(epoch FROM now() - min(available_at))::float8 AS oldest_ready_age_seconds
    FROM {schema}.jobs WHERE status = 'pending' AND available_at <= now() GROUP BY queue_name
)
SELECT q AS queue, coalesce(d.completed, 0) AS completed, coalesce(x.dead_lettered, 0) AS dead_lettered,
       coalesce(f.failed_attempts, 0) AS failed_attempts, coalesce(o.oldest_ready_age_seconds, 0) AS oldest_ready_age_seconds
FROM (SELECT queue_name AS q FROM done UNION SELECT queue_name FROM dead UNION SELECT queue_name FROM failed
      UNION SELECT queue_name FROM oldest) names
LEFT JOIN done d ON d.queue_name = q LEFT JOIN dead x ON x.queue_name = q
LEFT JOIN failed f ON f.queue_name = q LEFT JOIN oldest o ON o.queue_name = q
ORDER BY q;

-- name: periodic_schedule_list
-- Every periodic schedule with its last slot and counters, and the DB clock.
SELECT name, task, queue_name, cron, timezone, last_slot, enqueued_total, skipped_total, updated_at, now() AS db_now
FROM {schema}.periodic_schedules ORDER BY name;

-- name: job_events_since
-- Job events after an event id, oldest first (the job browser's change feed; the primary key bounds the walk).
SELECT id, job_id, queue_name, event, created_at FROM {schema}.job_events
WHERE id > %(after_id)s::bigint ORDER BY id LIMIT %(limit)s;

-- name: job_events_last_id
-- The newest job event id (0 when there are none): where a change feed starts.
SELECT coalesce(max(id), 0)::bigint AS id FROM {schema}.job_events;

-- name: job_newest_id
-- The newest job id (0 when there are none): new jobs are the ones above it.
SELECT coalesce(max(id), 0)::bigint AS id FROM {schema}.all_jobs;
