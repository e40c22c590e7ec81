-- Named statements of bench/queue_stats_cost.py (same format as src/tenure/core/sql/queries.sql).
-- `{schema}` is replaced by the quoted schema name.

-- name: bench_fill_jobs
-- Insert `total` jobs over `queues` queues: mostly completed, a few pending (ready and scheduled), running (some expired) and failed.
INSERT INTO {schema}.jobs (queue_name, task, payload, status, attempt_count, available_at, started_at,
                           completed_at, failed_at, last_heartbeat_at, lease_expires_at, locked_by, lock_token,
                           created_at, updated_at)
SELECT 'q' || mod(g, %(queues)s),
       'task' || mod(g, 7),
       jsonb_build_object('n', g),
       s.status::{schema}.job_status,
       CASE WHEN s.status = 'pending' THEN mod(g, 3) ELSE 1 + mod(g, 2) END,
       now() - make_interval(secs => mod(g, 86400)) + CASE WHEN s.status = 'pending' AND mod(g, 5) = 0
                                                       THEN interval '2 days' ELSE interval '0' END,
       CASE WHEN s.status IN ('running', 'completed', 'failed') THEN now() - make_interval(secs => mod(g, 3600)) END,
       CASE WHEN s.status = 'completed' THEN now() - make_interval(secs => mod(g, 3000)) END,
       CASE WHEN s.status = 'failed' THEN now() - make_interval(secs => mod(g, 3000)) END,
       CASE WHEN s.status = 'running' THEN now() - make_interval(secs => mod(g, 20)) END,
       CASE WHEN s.status = 'running' THEN now() + make_interval(secs => 30 - mod(g, 40)) END,
       CASE WHEN s.status = 'running' THEN 'bench-worker-' || mod(g, 50) END,
       CASE WHEN s.status = 'running' THEN gen_random_uuid() END,
       now(), now()
FROM generate_series(1, %(total)s) AS g
CROSS JOIN LATERAL (
    SELECT CASE WHEN mod(g, 1000) < %(pending_per_mille)s THEN 'pending'
                WHEN mod(g, 1000) < %(pending_per_mille)s + %(running_per_mille)s THEN 'running'
                WHEN mod(g, 1000) < %(pending_per_mille)s + %(running_per_mille)s + %(failed_per_mille)s THEN 'failed'
                ELSE 'completed' END AS status
) s;

-- name: bench_fill_events
-- One audit event per job (claimed/completed/reaped mix) so the reaped count walks a realistic job_events table.
INSERT INTO {schema}.job_events (job_id, queue_name, event, worker_id, attempt, created_at)
SELECT id, queue_name,
       CASE WHEN mod(id, 200) = 0 THEN 'reaped_due_to_expired_lease'
            WHEN mod(id, 2) = 0 THEN 'claimed' ELSE 'completed' END,
       'bench-worker', 1, now() - make_interval(secs => mod(id, 86400))
FROM {schema}.jobs;

-- name: bench_fill_workers
-- A registry of live workers serving the bench queues.
INSERT INTO {schema}.workers (id, host, pid, queues, concurrency, heartbeat_seconds, version)
SELECT 'bench-worker-' || g, 'bench', g, ARRAY(SELECT 'q' || q FROM generate_series(0, %(queues)s - 1) q), 10, 5, 'bench'
FROM generate_series(0, 49) g;

-- name: bench_status_counts
-- Rows per status, to print what was measured.
SELECT status::text AS status, count(*)::bigint AS n FROM {schema}.jobs GROUP BY status ORDER BY status;

-- name: bench_completed_count
-- The completed-count part of queue_stats alone.
SELECT queue_name, count(*) AS completed FROM {schema}.jobs WHERE status = 'completed' GROUP BY queue_name;

-- name: bench_reaped_count
-- The reaped-count part of queue_stats alone.
SELECT queue_name, count(*) AS reaped FROM {schema}.job_events
WHERE event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter') GROUP BY queue_name;

-- name: bench_completed_estimate
-- A cheaper alternative for the completed gauge: the planner's row estimate of the partial index (no per-queue split).
SELECT c.reltuples::bigint AS estimate FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s AND c.relname = 'jobs_completed_idx';

-- name: bench_queue_stats_proposed
-- The proposed per-scrape query: queue_stats without the completed count (read on a slower cadence or kept as a counter), queue filter pushed into each part.
WITH pending AS (
    SELECT queue_name,
           count(*) FILTER (WHERE available_at <= now()) AS ready,
           count(*) FILTER (WHERE available_at > now()) AS scheduled,
           coalesce(extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now())), 0) AS oldest_ready_age,
           count(*) FILTER (WHERE attempt_count > 0) AS redelivered
    FROM {schema}.jobs WHERE status = 'pending' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    GROUP BY queue_name
), running AS (
    SELECT queue_name,
           count(*) AS running,
           count(*) FILTER (WHERE lease_expires_at < now()) AS running_expired,
           coalesce(extract(epoch FROM now() - min(started_at)), 0) AS oldest_running_age,
           coalesce(extract(epoch FROM now() - min(last_heartbeat_at)), 0) AS lag_max,
           coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM now() - last_heartbeat_at)), 0) AS lag_p95,
           count(*) FILTER (WHERE attempt_count > 1) AS redelivered
    FROM {schema}.jobs WHERE status = 'running' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    GROUP BY queue_name
), failed AS (
    SELECT queue_name, count(*) AS failed FROM {schema}.jobs
    WHERE status = 'failed' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text) GROUP BY queue_name
), live AS (
    SELECT q AS queue_name, count(*) AS live_workers
    FROM {schema}.workers, unnest(queues) AS q
    WHERE stopped_at IS NULL AND last_seen_at > now() - make_interval(secs => 3 * heartbeat_seconds)
    GROUP BY q
), reaped AS (
    SELECT queue_name, count(*) AS reaped FROM {schema}.job_events
    WHERE event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter')
      AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text) GROUP BY queue_name
), queues AS (
    SELECT queue_name FROM pending UNION SELECT queue_name FROM running
    UNION SELECT queue_name FROM failed UNION SELECT queue_name FROM live
)
SELECT q.queue_name AS queue,
       coalesce(p.ready, 0)::bigint AS ready, coalesce(p.scheduled, 0)::bigint AS scheduled,
       coalesce(r.running, 0)::bigint AS running, coalesce(r.running_expired, 0)::bigint AS running_expired,
       coalesce(f.failed, 0)::bigint AS failed,
       coalesce(p.oldest_ready_age, 0)::float8 AS oldest_ready_age_seconds,
       coalesce(r.oldest_running_age, 0)::float8 AS oldest_running_age_seconds,
       coalesce(r.lag_max, 0)::float8 AS heartbeat_lag_max_seconds,
       coalesce(r.lag_p95, 0)::float8 AS heartbeat_lag_p95_seconds,
       coalesce(l.live_workers, 0)::bigint AS live_workers,
       (coalesce(p.redelivered, 0) + coalesce(r.redelivered, 0))::bigint AS redelivered,
       coalesce(rp.reaped, 0)::bigint AS reaped_total
FROM queues q
LEFT JOIN pending p USING (queue_name)
LEFT JOIN running r USING (queue_name)
LEFT JOIN failed f USING (queue_name)
LEFT JOIN live l USING (queue_name)
LEFT JOIN reaped rp USING (queue_name)
WHERE %(queue)s::text IS NULL OR q.queue_name = %(queue)s::text
ORDER BY q.queue_name;

-- name: bench_server_version
-- The server the figures were measured on.
SELECT version() AS version;
