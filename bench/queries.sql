-- Benchmark-only SQL (fixtures and measurements); never used by tenure itself.
-- `{schema}` is replaced by the quoted tenure schema name. Same format as src/tenure/core/sql/queries/*.sql.

-- name: tenure_done_count
-- Jobs finished so far (completed jobs live in job_history since 0009, older ones in jobs).
SELECT count(*)::bigint AS n FROM {schema}.all_jobs WHERE status = 'completed';

-- name: tenure_remaining
-- Jobs not finished yet (pending or running; two partial indexes, shrinking as the backlog drains).
SELECT (SELECT count(*) FROM {schema}.jobs WHERE status = 'pending')
     + (SELECT count(*) FROM {schema}.jobs WHERE status = 'running') AS n;

-- name: tenure_running_count
-- Jobs currently leased.
SELECT count(*)::bigint AS n FROM {schema}.jobs WHERE status = 'running';

-- name: tenure_fill_pending
-- Insert `n` ready no-op jobs in one statement (large fixtures; the normal path is enqueue_many).
INSERT INTO {schema}.jobs (queue_name, task, payload)
SELECT 'default', 'noop', '{}'::jsonb FROM generate_series(1, %(n)s);

-- name: tenure_fill_pending_payloads
-- The same with one job per payload of `payloads` (JSON texts, bench/payloads.py).
INSERT INTO {schema}.jobs (queue_name, task, payload)
SELECT 'default', 'noop', p::jsonb FROM unnest(%(payloads)s::text[]) AS p;

-- name: tenure_fill_completed
-- Insert `n` completed jobs (history that a big production table carries), where completions put them (0009).
INSERT INTO {schema}.job_history (id, queue_name, task, payload, status, attempt_count, started_at, completed_at,
                                  available_at, created_at)
SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id')), 'default', 'noop', '{}'::jsonb, 'completed', 1,
       now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours'
FROM generate_series(1, %(n)s);

-- name: tenure_fill_completed_payloads
-- The same with one job per payload of `payloads` (JSON texts, bench/payloads.py).
INSERT INTO {schema}.job_history (id, queue_name, task, payload, status, attempt_count, started_at, completed_at,
                                  available_at, created_at)
SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id')), 'default', 'noop', p::jsonb, 'completed', 1,
       now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours'
FROM unnest(%(payloads)s::text[]) AS p;

-- name: tenure_fill_expired
-- Insert `n` running jobs whose lease expired an hour ago, owned by a worker that never registered.
INSERT INTO {schema}.jobs (queue_name, task, payload, status, attempt_count, started_at, last_heartbeat_at,
                           lease_expires_at, locked_by, lock_token, fence, available_at)
SELECT 'default', 'noop', '{}'::jsonb, 'running', 1, now() - interval '2 hours', now() - interval '2 hours',
       now() - interval '1 hour', 'bench-dead-worker', gen_random_uuid(), g, now() - interval '2 hours'
FROM generate_series(1, %(n)s) AS g;

-- name: tenure_fill_expired_payloads
-- The same with one job per payload of `payloads` (JSON texts, bench/payloads.py); fences count on from `offset`.
INSERT INTO {schema}.jobs (queue_name, task, payload, status, attempt_count, started_at, last_heartbeat_at,
                           lease_expires_at, locked_by, lock_token, fence, available_at)
SELECT 'default', 'noop', p.payload::jsonb, 'running', 1, now() - interval '2 hours', now() - interval '2 hours',
       now() - interval '1 hour', 'bench-dead-worker', gen_random_uuid(), %(offset)s::bigint + p.g,
       now() - interval '2 hours'
FROM unnest(%(payloads)s::text[]) WITH ORDINALITY AS p(payload, g);

-- name: tenure_latency_db
-- Claim latency by the DB clock: started_at minus available_at of every started job, in ms.
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99, count(*)::bigint AS n
FROM (SELECT extract(epoch FROM started_at - available_at) * 1000 AS ms
      FROM {schema}.all_jobs WHERE started_at IS NOT NULL) s;

-- name: pgqueuer_remaining
-- Jobs still queued or picked (pgqueuer deletes a row when the job finishes).
SELECT count(*)::bigint AS n FROM pgqueuer;

-- name: procrastinate_remaining
-- Jobs not yet finished.
SELECT count(*)::bigint AS n FROM procrastinate_jobs WHERE status IN ('todo', 'doing');

-- name: table_vacuums
-- How often autovacuum vacuumed and analyzed one table (`rel`, e.g. tenure.jobs) so far, and how often a client vacuumed it (tenure's workers do).
SELECT coalesce(sum(autovacuum_count), 0)::bigint AS vacuums, coalesce(sum(autoanalyze_count), 0)::bigint AS analyzes,
       coalesce(sum(vacuum_count), 0)::bigint AS client_vacuums
FROM pg_stat_user_tables WHERE relid = to_regclass(%(rel)s);

-- name: db_analyze
-- Statistics for every table of the database (a backlog that was just filled has none yet).
ANALYZE;

-- name: db_backends
-- Other sessions connected to the current database (workers that have connected).
SELECT count(*)::bigint AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid();

-- name: db_commits
-- Transactions committed in the current database so far (one per autocommit statement).
SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database();

-- name: stat_statements_reset
-- Zero pg_stat_statements (only when the extension is loaded).
SELECT pg_stat_statements_reset();

-- name: stat_statements_top
-- The statements that ran in this database since the reset, heaviest first.
SELECT calls::bigint AS calls, total_exec_time::float8 AS total_ms, mean_exec_time::float8 AS mean_ms,
       rows::bigint AS rows, left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS query
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 8;

-- name: floor_create
-- The plain-SQL floor's table: the least a leased queue needs (id, status, token).
DROP TABLE IF EXISTS floor_jobs;
CREATE TABLE floor_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, status text NOT NULL DEFAULT 'pending',
                         token uuid, payload jsonb NOT NULL DEFAULT '{}') WITH (fillfactor = 70);
CREATE INDEX floor_jobs_pending_idx ON floor_jobs (id) WHERE status = 'pending';

-- name: floor_fill
-- Fill the floor table with `n` pending jobs.
INSERT INTO floor_jobs (status) SELECT 'pending' FROM generate_series(1, %(n)s);

-- name: floor_fill_payloads
-- The same with one job per payload of `payloads` (JSON texts, bench/payloads.py).
INSERT INTO floor_jobs (status, payload)
SELECT 'pending', p::jsonb FROM unnest(%(payloads)s::text[]) AS p;

-- name: floor_vacuum
-- Fresh statistics and visibility map for the floor table.
VACUUM ANALYZE floor_jobs;

-- name: tenure_vacuum
-- Fresh statistics and visibility map for the jobs table after a bulk fill.
VACUUM ANALYZE {schema}.jobs;

-- name: floor_remaining
-- Floor jobs not completed yet.
SELECT count(*)::bigint AS n FROM floor_jobs WHERE status <> 'done';

-- name: tenure_fill_healthy
-- Insert `n` running jobs with an hour of lease left (healthy in-flight work the reaper must skip cheaply).
INSERT INTO {schema}.jobs (queue_name, task, payload, status, attempt_count, started_at, last_heartbeat_at,
                           lease_expires_at, locked_by, lock_token, fence)
SELECT 'default', 'noop', '{}'::jsonb, 'running', 1, now(), now(), now() + interval '1 hour',
       'bench-live-worker', gen_random_uuid(), g
FROM generate_series(1, %(n)s) AS g;

-- name: tenure_fill_healthy_payloads
-- The same with one job per payload of `payloads` (JSON texts, bench/payloads.py); fences count on from `offset`.
INSERT INTO {schema}.jobs (queue_name, task, payload, status, attempt_count, started_at, last_heartbeat_at,
                           lease_expires_at, locked_by, lock_token, fence)
SELECT 'default', 'noop', p.payload::jsonb, 'running', 1, now(), now(), now() + interval '1 hour',
       'bench-live-worker', gen_random_uuid(), %(offset)s::bigint + p.g
FROM unnest(%(payloads)s::text[]) WITH ORDINALITY AS p(payload, g);

-- name: tenure_spread_priorities
-- Give every pending job a random priority in [-100, 100] (the priority drain variant).
UPDATE {schema}.jobs SET priority = floor(random() * 201)::int - 100 WHERE status = 'pending';

-- name: tenure_set_limit
-- Give the default queue a global running limit (the limit drain variant).
INSERT INTO {schema}.queues (name, max_running, updated_by) VALUES ('default', %(n)s, 'bench')
ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running;

-- name: tenure_claim_before_job_control
-- The claim statement before issue 14 (for EXPLAIN comparisons): one index scan in (queue, available_at, id) order.
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND queue_name = ANY(%(queues)s::text[]) AND available_at <= now()
    ORDER BY queue_name, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET status = 'running', started_at = now(), last_heartbeat_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease)s),
    locked_by = %(worker_id)s, lock_token = gen_random_uuid(),
    fence = nextval('{schema}.job_fence_seq'), attempt_count = j.attempt_count + 1, updated_at = now()
FROM picked WHERE j.id = picked.id
RETURNING j.id;

-- name: statements_reset
-- Forget the statement statistics of the whole server (pg_stat_statements), before a traced drain.
SELECT pg_stat_statements_reset();

-- name: statements_top
-- The statements of this database since the reset: calls, total, mean and longest call in ms, and the start of each text (the caller ranks them by the longest call and by the total).
SELECT calls, round(total_exec_time::numeric, 1)::float8 AS total_ms, round(mean_exec_time::numeric, 3)::float8 AS mean_ms,
       round(max_exec_time::numeric, 2)::float8 AS max_ms, left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0;

-- name: tenure_completion_longest
-- tenure's completion statement (job_complete_many) since the reset: calls and its longest call in ms.
SELECT coalesce(sum(calls), 0)::bigint AS calls, coalesce(max(max_exec_time), 0)::float8 AS max_ms
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query LIKE '%%DELETE FROM {schema}.jobs%%' AND query LIKE '%%INSERT INTO {schema}.job_history%%';

-- name: tenure_held_per_worker
-- Jobs each tenure worker holds now (status running: handlers in flight plus finished jobs whose outcome is not yet written), the largest of them.
SELECT coalesce(max(n), 0)::int AS held FROM (
    SELECT count(*) AS n FROM {schema}.jobs WHERE status = 'running' GROUP BY locked_by
) w;

-- name: statements_full
-- The statements of this database since the reset, with their whole text: calls and total time in ms (the flow-control scenarios pick the claim's statements out of them, bench/flowmath.py).
SELECT calls, total_exec_time::float8 AS total_ms, query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0;

-- name: tenure_job_times
-- Every job in enqueue order (id), wherever it lives: when it was ready and when its last attempt started, in epoch seconds (the database clock), and its fence (claim order).
SELECT id, extract(epoch FROM available_at)::float8 AS available, extract(epoch FROM started_at)::float8 AS started,
       fence
FROM {schema}.all_jobs ORDER BY id;
