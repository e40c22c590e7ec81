-- Series: the job browser's charts (issue 36 item 5), per time bucket over a window the caller
-- read from the database clock: jobs completed (job_history, and completed rows not moved yet),
-- failed attempts and dead letters (job_events), the wait from ready to start of completed jobs,
-- and the queue depth samples a reaper writes once a minute; the reaper also rolls up each closed
-- hour and quarter hour (0016), which the 7-day and 24-hour windows read instead of the jobs
-- (the two writes of this area). Run by src/tenure/core/repository/series.py (SeriesQueries),
-- unprepared so that a NULL queue folds away. A bucket is floor((t - since) / step); rows at or
-- after `until` are left out. The raw reads take the span [lo, hi) of completion (or event)
-- times to read: the whole window, or the periods the rollup does not cover.
-- The wait histogram's bucket of a wait of w seconds (the same expression in the rollup and the
-- raw read; tenure/ui/series.py turns buckets back into seconds): 0 under 1 ms, else
-- least(180, 1 + floor(20 * log10(w * 1000))): 20 buckets per decade, the last one open-ended.

-- name: queue_series_completed
-- Jobs completed per bucket in [lo, hi), of one queue or all (each day partition of job_history by completed_at).
SELECT floor(extract(epoch FROM completed_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       count(*)::bigint AS completed
FROM {schema}.all_jobs
WHERE status = 'completed' AND completed_at >= %(lo)s::timestamptz AND completed_at < %(hi)s::timestamptz
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_failures
-- Failed attempts (retried, dead-lettered or reaped) and dead letters per bucket, from the audit events (BRIN on created_at).
SELECT floor(extract(epoch FROM created_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       count(*)::bigint AS failed_attempts,
       count(*) FILTER (WHERE event IN ('dead_lettered', 'reaped_to_dead_letter'))::bigint AS dead_lettered
FROM {schema}.job_events
WHERE created_at >= %(lo)s::timestamptz AND created_at < %(hi)s::timestamptz
  AND event IN ('retry_scheduled', 'dead_lettered', 'reaped_due_to_expired_lease', 'reaped_to_dead_letter')
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_wait
-- Per bucket of started_at, p50 and p95 of the wait from ready (available_at) to start, in seconds, of the jobs completed in [lo, hi) that started in it.
SELECT floor(extract(epoch FROM started_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       count(*)::bigint AS jobs,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY greatest(extract(epoch FROM started_at - available_at), 0))::float8 AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY greatest(extract(epoch FROM started_at - available_at), 0))::float8 AS p95
FROM {schema}.all_jobs
WHERE status = 'completed' AND completed_at >= %(lo)s::timestamptz AND completed_at < %(hi)s::timestamptz
  AND started_at >= %(since)s::timestamptz AND started_at < %(until)s::timestamptz
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_wait_histogram
-- Per bucket of started_at, the wait histogram (non-empty wait buckets and their jobs) of the jobs completed in [lo, hi) that started in it.
SELECT bucket, array_agg(wait_bucket ORDER BY wait_bucket) AS wait_buckets, array_agg(jobs ORDER BY wait_bucket) AS jobs
FROM (
    SELECT floor(extract(epoch FROM j.started_at - %(since)s::timestamptz) / %(step)s)::int AS bucket,
           CASE WHEN w.wait < 0.001 THEN 0 ELSE least(180, 1 + floor(20 * log(w.wait * 1000))::int) END AS wait_bucket,
           count(*)::bigint AS jobs
    FROM {schema}.all_jobs j
    CROSS JOIN LATERAL (SELECT greatest(extract(epoch FROM j.started_at - j.available_at)::float8, 0) AS wait) w
    WHERE j.status = 'completed' AND j.completed_at >= %(lo)s::timestamptz AND j.completed_at < %(hi)s::timestamptz
      AND j.started_at >= %(since)s::timestamptz AND j.started_at < %(until)s::timestamptz
      AND (%(queue)s::text IS NULL OR j.queue_name = %(queue)s::text)
    GROUP BY 1, 2
) h
GROUP BY bucket;

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

-- name: queue_series_rolled_periods
-- The periods `seconds` long of [since, until) the reaper has rolled up (queue_series_rollups), oldest first.
SELECT period FROM {schema}.queue_series_rollups
WHERE seconds = %(seconds)s::int AND period >= %(since)s::timestamptz AND period < %(until)s::timestamptz
ORDER BY period;

-- name: queue_series_rolled_counts
-- Jobs completed, failed attempts and dead letters per bucket, from the rolled-up periods given (queue_series_periods).
SELECT floor(extract(epoch FROM period - %(since)s::timestamptz) / %(step)s)::int AS bucket,
       sum(completed)::bigint AS completed, sum(failed_attempts)::bigint AS failed_attempts,
       sum(dead_lettered)::bigint AS dead_lettered
FROM {schema}.queue_series_periods
WHERE seconds = %(seconds)s::int AND period = ANY (%(periods)s::timestamptz[])
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY 1;

-- name: queue_series_rolled_wait
-- Per bucket of the period of start, the wait histogram of the jobs completed in the rolled-up periods given that started in [since, until).
SELECT bucket, array_agg(wait_bucket ORDER BY wait_bucket) AS wait_buckets, array_agg(jobs ORDER BY wait_bucket) AS jobs
FROM (
    SELECT floor(extract(epoch FROM w.started_period - %(since)s::timestamptz) / %(step)s)::int AS bucket,
           u.wait_bucket::int AS wait_bucket, sum(u.jobs)::bigint AS jobs
    FROM {schema}.queue_wait_periods w
    CROSS JOIN LATERAL unnest(w.wait_buckets, w.jobs) AS u(wait_bucket, jobs)
    WHERE w.seconds = %(seconds)s::int AND w.period = ANY (%(periods)s::timestamptz[])
      AND w.started_period >= %(since)s::timestamptz AND w.started_period < %(until)s::timestamptz
      AND (%(queue)s::text IS NULL OR w.queue_name = %(queue)s::text)
    GROUP BY 1, 2
) h
GROUP BY bucket;

-- name: queue_series_rollup_due
-- Delete rolled-up periods `seconds` long older than `keep` seconds (their figures go with them), and list the closed ones since then not rolled up yet, newest first.
WITH gone AS (
    DELETE FROM {schema}.queue_series_rollups
    WHERE seconds = %(seconds)s::int AND period < now() - make_interval(secs => %(keep)s)
)
SELECT p AS period
FROM generate_series(
    date_bin(make_interval(secs => %(seconds)s), now() - make_interval(secs => %(keep)s), timestamptz 'epoch')
        + make_interval(secs => %(seconds)s),
    date_bin(make_interval(secs => %(seconds)s), now() - make_interval(secs => %(lag)s), timestamptz 'epoch')
        - make_interval(secs => %(seconds)s),
    make_interval(secs => %(seconds)s)) AS p
WHERE NOT EXISTS (SELECT 1 FROM {schema}.queue_series_rollups r WHERE r.seconds = %(seconds)s::int AND r.period = p)
ORDER BY p DESC
LIMIT %(limit)s;

-- name: queue_series_rollup_bound
-- Bound the waits of the rollup that follows in this transaction (lock and statement timeouts, in ms), so a locked job_history never holds up the reaper that rolls it up.
SELECT set_config('lock_timeout', %(lock_ms)s::text, true), set_config('statement_timeout', %(statement_ms)s::text, true);

-- name: queue_series_rollup_period
-- Roll up the period [lo, hi) `seconds` long of every queue once it ended `lag` seconds ago, unless already done: only the statement that inserts its row writes its figures.
WITH mark AS (
    INSERT INTO {schema}.queue_series_rollups (seconds, period)
    SELECT %(seconds)s::int, %(lo)s::timestamptz
    WHERE %(hi)s::timestamptz <= now() - make_interval(secs => %(lag)s)
    ON CONFLICT (seconds, period) DO NOTHING
    RETURNING seconds, period
), waits AS (
    SELECT j.queue_name, date_bin(make_interval(secs => %(seconds)s), j.started_at, timestamptz 'epoch') AS started_period,
           CASE WHEN w.wait < 0.001 THEN 0 ELSE least(180, 1 + floor(20 * log(w.wait * 1000))::int) END AS wait_bucket,
           count(*) AS jobs
    FROM {schema}.all_jobs j
    CROSS JOIN LATERAL (SELECT greatest(extract(epoch FROM j.started_at - j.available_at)::float8, 0) AS wait) w
    WHERE j.status = 'completed' AND j.completed_at >= %(lo)s::timestamptz AND j.completed_at < %(hi)s::timestamptz
      AND EXISTS (SELECT 1 FROM mark)
    GROUP BY 1, 2, 3
), done AS (
    SELECT queue_name, sum(jobs)::bigint AS completed FROM waits GROUP BY 1
), failed AS (
    SELECT queue_name, count(*)::bigint AS failed_attempts,
           count(*) FILTER (WHERE event IN ('dead_lettered', 'reaped_to_dead_letter'))::bigint AS dead_lettered
    FROM {schema}.job_events
    WHERE created_at >= %(lo)s::timestamptz AND created_at < %(hi)s::timestamptz AND EXISTS (SELECT 1 FROM mark)
      AND event IN ('retry_scheduled', 'dead_lettered', 'reaped_due_to_expired_lease', 'reaped_to_dead_letter')
    GROUP BY 1
), counts AS (
    INSERT INTO {schema}.queue_series_periods (seconds, period, queue_name, completed, failed_attempts, dead_lettered)
    SELECT m.seconds, m.period, coalesce(d.queue_name, f.queue_name), coalesce(d.completed, 0),
           coalesce(f.failed_attempts, 0), coalesce(f.dead_lettered, 0)
    FROM mark m CROSS JOIN (done d FULL JOIN failed f ON f.queue_name = d.queue_name)
    RETURNING 1
), histograms AS (
    INSERT INTO {schema}.queue_wait_periods (seconds, period, queue_name, started_period, wait_buckets, jobs)
    SELECT m.seconds, m.period, w.queue_name, w.started_period, array_agg(w.wait_bucket::smallint ORDER BY w.wait_bucket),
           array_agg(w.jobs::integer ORDER BY w.wait_bucket)
    FROM mark m CROSS JOIN waits w
    WHERE w.started_period IS NOT NULL
    GROUP BY m.seconds, m.period, w.queue_name, w.started_period
    RETURNING 1
)
SELECT (SELECT count(*) FROM mark)::int AS rolled, (SELECT count(*) FROM counts)::int AS queues,
       (SELECT count(*) FROM histograms)::int AS histograms;
