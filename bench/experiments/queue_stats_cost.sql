-- Named statements of bench/experiments/queue_stats_cost.py (same format as src/tenure/core/sql/queries/*.sql).
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

-- name: bench_reaped_count
-- The reaped-count part of queue_stats alone.
SELECT queue_name, count(*) AS reaped FROM {schema}.job_events
WHERE event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter') GROUP BY queue_name;

-- name: bench_completed_estimate
-- A cheaper alternative for the completed gauge: the planner's row estimate of the partial index (no per-queue split).
SELECT c.reltuples::bigint AS estimate FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s AND c.relname = 'jobs_completed_idx';

-- name: bench_server_version
-- The server the figures were measured on.
SELECT version() AS version;
