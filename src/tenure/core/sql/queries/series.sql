-- Series: the job browser's charts (issue 36 item 5), per time bucket over a window the caller
-- read from the database clock: jobs completed (job_history, and completed rows not moved yet),
-- failed attempts and dead letters (job_events), the wait from ready to start of completed jobs,
-- and the queue depth samples a reaper writes once a minute (the one write of this area).
-- Run by src/tenure/core/repository/series.py (SeriesQueries), unprepared so that a NULL queue
-- folds away. A bucket is floor((t - since) / step); rows at or after `until` are left out.

-- name: queue_series_completed
-- Jobs completed per bucket in [since, until), of one queue or all (each day partition of job_history by completed_at).
SELECT floor(extract(epoch FROM completed_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       count(*)::bigint AS completed
FROM {schema}.all_jobs
WHERE status = 'completed' AND completed_at >= %(since)s::timestamptz AND completed_at < %(until)s::timestamptz
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_failures
-- Failed attempts (retried, dead-lettered or reaped) and dead letters per bucket, from the audit events (BRIN on created_at).
SELECT floor(extract(epoch FROM created_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       count(*)::bigint AS failed_attempts,
       count(*) FILTER (WHERE event IN ('dead_lettered', 'reaped_to_dead_letter'))::bigint AS dead_lettered
FROM {schema}.job_events
WHERE created_at >= %(since)s::timestamptz AND created_at < %(until)s::timestamptz
  AND event IN ('retry_scheduled', 'dead_lettered', 'reaped_due_to_expired_lease', 'reaped_to_dead_letter')
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_wait
-- Per bucket of started_at, p50 and p95 of the wait from ready (available_at) to start, in seconds, of the completed jobs that started in it.
SELECT floor(extract(epoch FROM started_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       count(*)::bigint AS jobs,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY greatest(extract(epoch FROM started_at - available_at), 0))::float8 AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY greatest(extract(epoch FROM started_at - available_at), 0))::float8 AS p95
FROM {schema}.all_jobs
WHERE status = 'completed' AND completed_at >= %(since)s::timestamptz
  AND started_at >= %(since)s::timestamptz AND started_at < %(until)s::timestamptz
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_depth
-- Per bucket, the highest sampled depth (ready, blocked, running) of one queue or of all queues summed per sample.
WITH samples AS (
    SELECT sampled_at, sum(ready) AS ready, sum(blocked) AS blocked, sum(running) AS running
    FROM {schema}.queue_depth_samples
    WHERE sampled_at >= %(since)s::timestamptz AND sampled_at < %(until)s::timestamptz
      AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    GROUP BY sampled_at
)
SELECT floor(extract(epoch FROM sampled_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       max(ready)::bigint AS ready, max(blocked)::bigint AS blocked, max(running)::bigint AS running,
       count(*)::bigint AS samples
FROM samples GROUP BY 1;

-- name: queue_series_known
-- Whether a queue has any trace: a job, a completed job, a control row or a depth sample.
SELECT EXISTS (SELECT 1 FROM {schema}.jobs WHERE queue_name = %(queue)s)
    OR EXISTS (SELECT 1 FROM {schema}.job_history WHERE queue_name = %(queue)s)
    OR EXISTS (SELECT 1 FROM {schema}.queues WHERE name = %(queue)s)
    OR EXISTS (SELECT 1 FROM {schema}.queue_depth_samples WHERE queue_name = %(queue)s) AS known;

-- name: queue_depth_sample
-- Record this minute's depth of every queue (once per minute and queue, whoever writes first) and delete samples older than 8 days.
WITH gone AS (
    DELETE FROM {schema}.queue_depth_samples WHERE sampled_at < now() - interval '8 days'
)
INSERT INTO {schema}.queue_depth_samples (sampled_at, queue_name, ready, blocked, running)
SELECT date_trunc('minute', now()), q, r, b, u
FROM unnest(%(queues)s::text[], %(ready)s::bigint[], %(blocked)s::bigint[], %(running)s::bigint[]) AS t(q, r, b, u)
ON CONFLICT (sampled_at, queue_name) DO NOTHING;
