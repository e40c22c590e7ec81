-- Named statements of bench/experiments/ui_scale.py and ui_seed.py (same format as src/tenure/core/sql/queries/*.sql).
-- `{schema}` is replaced by the quoted schema name. Every row is a pure function of its
-- number g in 1..total (hashes, no random()), so a reseed gives the same jobs.

-- name: seed_meta_create
-- The seed's own record: when it was taken (its "now"), how many jobs, and whether it finished.
CREATE TABLE IF NOT EXISTS {schema}.bench_ui_seed (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    anchor timestamptz NOT NULL, total bigint NOT NULL, seeded bigint NOT NULL DEFAULT 0,
    done boolean NOT NULL DEFAULT false
);

-- name: seed_meta_get
-- The seed's record, if any.
SELECT anchor, total, seeded, done FROM {schema}.bench_ui_seed;

-- name: seed_meta_start
-- Start (or restart) a seed of `total` jobs anchored at the server's now().
INSERT INTO {schema}.bench_ui_seed (anchor, total) VALUES (now(), %(total)s)
ON CONFLICT (id) DO UPDATE SET anchor = now(), total = EXCLUDED.total, seeded = 0, done = false
RETURNING anchor;

-- name: seed_meta_progress
-- Record that jobs 1..seeded exist (a killed seed resumes after them).
UPDATE {schema}.bench_ui_seed SET seeded = %(seeded)s, done = %(done)s;

-- name: seed_jobs
-- Jobs lo..hi of `total`: ids in creation order over the 30 days before `anchor`; the newest 0.2% are the ready backlog (about 1.4 h of enqueues: every other job started that long after its enqueue), 300 below them are running (leased), the rest ~91% completed, ~3% failed, ~2% cancelled, ~3.8% pending with a later available_at (retries, schedules); 5 queues (`legacy` only in the oldest tenth), 9 tasks plus a rare one, 15% non-zero priorities, 20% idempotency keys.
INSERT INTO {schema}.jobs (id, queue_name, task, payload, status, attempt_count, max_attempts, fence, available_at,
                           started_at, completed_at, failed_at, first_failed_at, last_failed_at, cancelled_at,
                           last_heartbeat_at, lease_expires_at, locked_by, lock_token, idempotency_key,
                           last_error, last_error_code, created_at, updated_at, priority)
OVERRIDING SYSTEM VALUE
SELECT r.g, r.queue_name, r.task, r.payload, r.status::{schema}.job_status,
       CASE r.status WHEN 'failed' THEN 5 WHEN 'pending' THEN r.retries ELSE 1 END,
       5,
       CASE WHEN r.status <> 'pending' OR r.retries > 0 THEN r.g END,
       CASE WHEN r.status = 'pending' AND r.retries > 0 THEN %(anchor)s::timestamptz + r.u7 * interval '7 days'
            ELSE r.created_at END,
       CASE WHEN r.status IN ('running', 'completed', 'failed') THEN r.created_at + r.wait END,
       CASE WHEN r.status = 'completed' THEN r.created_at + r.wait + r.run END,
       CASE WHEN r.status = 'failed' THEN r.created_at + r.wait + r.run END,
       CASE WHEN r.status = 'failed' OR r.retries > 0 THEN r.created_at + r.wait END,
       CASE WHEN r.status = 'failed' OR r.retries > 0 THEN r.created_at + r.wait + r.run END,
       CASE WHEN r.status = 'cancelled' THEN r.created_at + r.wait END,
       CASE WHEN r.status IN ('running', 'completed', 'failed') THEN r.created_at + r.wait + r.run END,
       CASE WHEN r.status = 'running' THEN %(anchor)s::timestamptz + interval '30 seconds' END,
       CASE WHEN r.status = 'running' THEN 'bench-worker-' || (r.g %% 20) END,
       CASE WHEN r.status = 'running' THEN md5(r.g::text)::uuid END,
       CASE WHEN r.u8 < 0.2 THEN 'order-' || r.g END,
       CASE WHEN r.status = 'failed' OR r.retries > 0 THEN 'TimeoutError: upstream did not answer in 30 s' END,
       CASE WHEN r.status = 'failed' OR r.retries > 0 THEN 'TimeoutError' END,
       r.created_at,
       r.created_at + r.wait + r.run,
       CASE WHEN r.u6 < 0.85 THEN 0 ELSE least(100, floor(r.u7 * 201)::int - 100) END
FROM (
    SELECT s.*,
           %(anchor)s::timestamptz - interval '30 days' * (1 - s.g::float8 / %(total)s) AS created_at,
           make_interval(secs => %(lag)s + s.u4 * 5) AS wait,
           make_interval(secs => 0.2 + s.u5 * 120) AS run,
           CASE WHEN s.status = 'pending' AND s.g <= %(ready_after)s THEN 1 + (s.g %% 4) ELSE 0 END AS retries,
           CASE WHEN s.g <= %(total)s / 10 AND s.u3 < 0.01 THEN 'legacy'
                WHEN s.u3 < 0.5 THEN 'default' WHEN s.u3 < 0.75 THEN 'emails'
                WHEN s.u3 < 0.9 THEN 'reports' ELSE 'webhooks' END AS queue_name,
           CASE WHEN s.u9 < 0.0001 THEN 'search.reindex'
                WHEN s.g <= %(total)s / 10 AND s.u3 < 0.01 THEN 'legacy.migrate'
                WHEN s.u3 < 0.5 THEN (ARRAY['invoice.render', 'invoice.send', 'customer.sync'])[1 + (s.g %% 3)]
                WHEN s.u3 < 0.75 THEN (ARRAY['email.send', 'email.digest'])[1 + (s.g %% 2)]
                WHEN s.u3 < 0.9 THEN (ARRAY['report.daily', 'report.export'])[1 + (s.g %% 2)]
                ELSE 'webhook.deliver' END AS task,
           jsonb_build_object('invoice_id', s.g, 'customer', 'cust-' || (s.g %% 1000)) AS payload
    FROM (
        SELECT g, u1, u3, u4, u5, u6, u7, u8, u9,
               CASE WHEN g > %(ready_after)s THEN 'pending'
                    WHEN g > %(ready_after)s - %(running)s THEN 'running'
                    WHEN u1 < 0.038 THEN 'pending'
                    WHEN u1 < 0.068 THEN 'failed'
                    WHEN u1 < 0.088 THEN 'cancelled'
                    ELSE 'completed' END AS status
        FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
        CROSS JOIN LATERAL (
            SELECT (hashint8extended(g, 1) & 1048575) / 1048576.0 AS u1,
                   (hashint8extended(g, 3) & 1048575) / 1048576.0 AS u3,
                   (hashint8extended(g, 4) & 1048575) / 1048576.0 AS u4,
                   (hashint8extended(g, 5) & 1048575) / 1048576.0 AS u5,
                   (hashint8extended(g, 6) & 1048575) / 1048576.0 AS u6,
                   (hashint8extended(g, 7) & 1048575) / 1048576.0 AS u7,
                   (hashint8extended(g, 8) & 1048575) / 1048576.0 AS u8,
                   (hashint8extended(g, 9) & 1048575) / 1048576.0 AS u9
        ) h
    ) s
) r;

-- name: seed_events
-- The audit trail of one job in five among jobs lo..hi (a claim and the attempt's end; a failed job's five attempts), so job_events is millions of rows and a detail page reads a realistic index.
INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail, created_at)
SELECT j.id, j.queue_name, e.event, md5(j.id::text || ':' || a)::uuid, 'bench-worker-' || (j.id %% 20), a,
       CASE WHEN e.event IN ('retry_scheduled', 'dead_lettered') THEN 'TimeoutError' END,
       CASE WHEN e.event <> 'claimed' THEN jsonb_build_object('fence', j.id * 10 + a, 'started_at', j.started_at) END,
       coalesce(j.started_at, j.created_at) + make_interval(secs => a * 10 + e.k)
FROM {schema}.jobs j
CROSS JOIN LATERAL generate_series(1, greatest(j.attempt_count, 1)) AS a
CROSS JOIN LATERAL (VALUES
    (0, 'claimed'),
    (1, CASE WHEN j.status = 'completed' THEN 'completed'
             WHEN j.status = 'failed' AND a = j.attempt_count THEN 'dead_lettered'
             WHEN j.status = 'cancelled' THEN 'cancelled'
             WHEN j.status = 'running' THEN NULL
             ELSE 'retry_scheduled' END)
) AS e(k, event)
WHERE j.id BETWEEN %(lo)s AND %(hi)s AND j.id %% 5 = 0 AND e.event IS NOT NULL
  AND (j.status <> 'pending' OR j.attempt_count > 0);

-- name: seed_sequence
-- Move the identity past the seeded ids, so a later enqueue gets a fresh one.
SELECT setval(pg_get_serial_sequence(%(table)s, 'id'), (SELECT coalesce(max(id), 1) FROM {schema}.jobs));

-- name: seed_counts
-- Jobs per status, for the report.
SELECT status::text AS status, count(*)::bigint AS n FROM {schema}.jobs GROUP BY status ORDER BY status;

-- name: seed_sizes
-- On-disk size of jobs, its indexes and job_events.
SELECT c.relname AS name, pg_relation_size(c.oid)::bigint AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s AND c.relkind IN ('r', 'i') AND c.relname NOT LIKE 'bench_%%'
ORDER BY pg_relation_size(c.oid) DESC;

-- name: pick_detail_ids
-- Jobs for the detail timing: ones with an audit trail (failed with five attempts, completed, running).
(SELECT id FROM {schema}.jobs WHERE status = 'failed' AND id %% 5 = 0 AND id > %(total)s / 2 ORDER BY id LIMIT 10)
UNION ALL
(SELECT id FROM {schema}.jobs WHERE status = 'completed' AND id %% 5 = 0 AND id > %(total)s / 3 ORDER BY id LIMIT 10)
UNION ALL
(SELECT id FROM {schema}.jobs WHERE status = 'running' AND id %% 5 = 0 ORDER BY id LIMIT 5);

-- name: pick_idempotency_key
-- One present idempotency key (an old job's, far from the first page).
SELECT idempotency_key FROM {schema}.jobs WHERE idempotency_key IS NOT NULL AND id > %(total)s / 7 ORDER BY id LIMIT 1;

-- name: cost_fill
-- A backlog of `n` ready jobs with the seed's payload shape, for bench/experiments/ui_index_cost.py.
INSERT INTO {schema}.jobs (queue_name, task, payload)
SELECT 'default', 'invoice.render', jsonb_build_object('invoice_id', g, 'customer', 'cust-' || (g %% 1000))
FROM generate_series(1, %(n)s) AS g;

-- name: cost_vacuum
-- Fresh statistics and visibility after the fill (and after dropping indexes).
VACUUM (ANALYZE) {schema}.jobs;

-- name: cost_backend
-- The measured connection's backend process.
SELECT pg_backend_pid() AS pid;

-- name: feed_backends
-- The backends of tenure ui's change feed (their statements are no request's).
SELECT array_agg(pid)::text AS pids FROM pg_stat_activity
WHERE application_name = 'tenure-ui-feed' AND datname = current_database();

-- name: database_exists
-- Whether a database of this name exists on the server.
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS present;

-- name: database_current
-- This connection's database and the server's version.
SELECT current_database() AS name, current_setting('server_version') AS server_version;

-- name: secondary_indexes
-- The indexes of a table that back no constraint (dropped during the seed's load, rebuilt after it).
SELECT i.indexname, i.indexdef FROM pg_indexes i
JOIN pg_namespace n ON n.nspname = i.schemaname
JOIN pg_class c ON c.relname = i.indexname AND c.relnamespace = n.oid
WHERE i.schemaname = %(schema_name)s AND i.tablename = %(table)s
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = c.oid);
