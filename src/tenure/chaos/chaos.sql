-- Named queries of the chaos harness (tenure.chaos). Same format as core/sql/queries/*.sql and
-- loaded with tenure.core.queries.parse_named_queries; run only by tenure/chaos/store.py.
-- `{schema}` is the quoted schema of the run. The harness keeps its own tables there
-- (chaos_effects, chaos_faults, chaos_fences, chaos_lease_samples, chaos_returns, chaos_capacity_samples,
-- chaos_flow_samples, chaos_unique_samples) next to
-- tenure's; every time is the DB clock.

-- name: chaos_setup
-- Create the harness's tables (idempotent): effects written by jobs, injected faults, attempts that stopped on LeaseLost, lease samples, handler returns, per-worker held-job samples.
CREATE TABLE IF NOT EXISTS {schema}.chaos_effects (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_n        integer     NOT NULL,
    job_id       bigint      NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('guarded', 'guarded_provider_dedup', 'unguarded')),
    idem_key     text,
    lock_token   uuid        NOT NULL,
    fence        bigint      NOT NULL,
    attempt      integer     NOT NULL,
    pid          integer     NOT NULL,
    worker_wall  timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS chaos_effects_guarded_key ON {schema}.chaos_effects (idem_key)
    WHERE kind = 'guarded';
CREATE INDEX IF NOT EXISTS chaos_effects_job_idx ON {schema}.chaos_effects (job_id);
CREATE TABLE IF NOT EXISTS {schema}.chaos_faults (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL,
    pid         integer,
    job_id      bigint,
    lock_token  uuid,
    detail      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS chaos_faults_job_once ON {schema}.chaos_faults (job_id, kind)
    WHERE job_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS {schema}.chaos_fences (
    lock_token  uuid        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('self_fenced', 'effect_succeed_rejected')),
    pid         integer     NOT NULL,
    noted_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.chaos_lease_samples (
    lock_token            uuid        PRIMARY KEY,
    job_id                bigint      NOT NULL,
    max_lease_expires_at  timestamptz NOT NULL,
    last_sampled_at       timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.chaos_returns (
    lock_token   uuid        PRIMARY KEY,
    job_id       bigint      NOT NULL,
    attempt      integer     NOT NULL,
    pid          integer     NOT NULL,
    returned_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.chaos_capacity_samples (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sampled_at   timestamptz NOT NULL,
    worker_id    text        NOT NULL,
    pid          integer,
    concurrency  integer     NOT NULL,
    held         integer     NOT NULL,
    tokens       uuid[]
);
CREATE TABLE IF NOT EXISTS {schema}.chaos_flow_samples (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sampled_at   timestamptz NOT NULL,
    flow_key     text        NOT NULL,
    running      integer     NOT NULL,
    live         integer     NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.chaos_unique_samples (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sampled_at   timestamptz NOT NULL,
    keys_held    integer     NOT NULL,
    max_holders  integer     NOT NULL,
    unique_key   text
);

-- name: chaos_schema_drop
-- Drop the whole run schema (tenure's tables and the harness's) at the end of a run.
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: chaos_db_now
-- The database clock as epoch seconds.
SELECT extract(epoch FROM clock_timestamp())::float8 AS epoch;

-- name: chaos_effect_guarded
-- The guarded effect, sent to a "provider" that honours the idempotency key (R14): applied once; a repeat call is logged as a provider dedup.
WITH applied AS (
    INSERT INTO {schema}.chaos_effects (job_n, job_id, kind, idem_key, lock_token, fence, attempt, pid, worker_wall)
    VALUES (%(n)s, %(job_id)s, 'guarded', %(key)s, %(token)s, %(fence)s, %(attempt)s, %(pid)s, to_timestamp(%(wall)s))
    ON CONFLICT (idem_key) WHERE kind = 'guarded' DO NOTHING
    RETURNING id
), dedup AS (
    INSERT INTO {schema}.chaos_effects (job_n, job_id, kind, idem_key, lock_token, fence, attempt, pid, worker_wall)
    SELECT %(n)s, %(job_id)s, 'guarded_provider_dedup', %(key)s, %(token)s, %(fence)s, %(attempt)s, %(pid)s,
           to_timestamp(%(wall)s)
    WHERE NOT EXISTS (SELECT 1 FROM applied)
    RETURNING id
)
SELECT (SELECT count(*) FROM applied)::int AS applied, (SELECT count(*) FROM dedup)::int AS deduplicated;

-- name: chaos_effect_lookup
-- What the "provider" answers a reconcile: the reference of the guarded effect applied under this key, if any.
SELECT 'effect-' || job_n AS ref FROM {schema}.chaos_effects WHERE idem_key = %(key)s AND kind = 'guarded';

-- name: chaos_effect_unguarded
-- The unguarded counter: a plain insert on every attempt that reaches it (what happens without the guard).
INSERT INTO {schema}.chaos_effects (job_n, job_id, kind, idem_key, lock_token, fence, attempt, pid, worker_wall)
VALUES (%(n)s, %(job_id)s, 'unguarded', NULL, %(token)s, %(fence)s, %(attempt)s, %(pid)s, to_timestamp(%(wall)s))
RETURNING id;

-- name: chaos_fault_fire
-- Record a job-level fault (kill marker, hang) at most once per job and kind; returns a row only when this call fired it.
INSERT INTO {schema}.chaos_faults (kind, pid, job_id, lock_token, detail)
VALUES (%(kind)s, %(pid)s, %(job_id)s, %(token)s, %(detail)s)
ON CONFLICT (job_id, kind) WHERE job_id IS NOT NULL DO NOTHING
RETURNING id;

-- name: chaos_fault_record
-- Record a harness-level fault (SIGSTOP, partition, restart, process exit, clock skew) at a given DB time.
INSERT INTO {schema}.chaos_faults (kind, pid, detail, started_at, ended_at)
VALUES (%(kind)s, %(pid)s, %(detail)s, to_timestamp(%(started)s), to_timestamp(%(ended)s))
RETURNING id;

-- name: chaos_fence_note
-- Note that an attempt stopped on LeaseLost: before any write (self_fenced) or because eff.succeeded() was rejected.
INSERT INTO {schema}.chaos_fences (lock_token, job_id, kind, pid)
VALUES (%(token)s, %(job_id)s, %(kind)s, %(pid)s)
ON CONFLICT (lock_token) DO NOTHING;

-- name: chaos_returned
-- Note that an attempt's handler returned successfully (its last act): the outcome the worker now owes is a completion.
INSERT INTO {schema}.chaos_returns (lock_token, job_id, attempt, pid)
VALUES (%(token)s, %(job_id)s, %(attempt)s, %(pid)s)
ON CONFLICT (lock_token) DO NOTHING;

-- name: chaos_capacity_sample
-- Per worker, the running jobs it holds under an unexpired lease in one snapshot, against its registered concurrency (the tokens only when above it).
INSERT INTO {schema}.chaos_capacity_samples (sampled_at, worker_id, pid, concurrency, held, tokens)
SELECT now(), w.id, w.pid, w.concurrency, h.held, CASE WHEN h.held > w.concurrency THEN h.tokens END
FROM (SELECT locked_by, count(*)::int AS held, array_agg(lock_token) AS tokens FROM {schema}.jobs
      WHERE status = 'running' AND lease_expires_at > now() GROUP BY locked_by) h
JOIN {schema}.workers w ON w.id = h.locked_by;

-- name: chaos_flow_sample
-- The flow key with the most running jobs in one snapshot: its running rows and those under an unexpired lease (flow_within_limit).
INSERT INTO {schema}.chaos_flow_samples (sampled_at, flow_key, running, live)
SELECT now(), flow_key, count(*)::int, (count(*) FILTER (WHERE lease_expires_at > now()))::int FROM {schema}.jobs
WHERE status = 'running' AND flow_key IS NOT NULL
GROUP BY flow_key ORDER BY count(*) DESC LIMIT 1;

-- name: chaos_flow_samples
-- Every per-key running sample of the run, oldest first.
SELECT extract(epoch FROM sampled_at)::float8 AS sampled_at, flow_key, running, live
FROM {schema}.chaos_flow_samples ORDER BY id;

-- name: chaos_attempts
-- Every attempt of the run's jobs, by start (a job never claimed: one row, no start), with its job's flow key, rate limit, units, enqueue time and pending cancel: rate_within_limit and keys_served.
-- A claim writes no audit row: an attempt is the record that ended it (its `fence` and
-- `started_at`, the claim's now(), in `detail`; a reaped attempt's reap too), or the running row.
-- `ended_at` is that record's time (NULL while running), `delay` how long after it the job was
-- runnable again when it went back to the queue (a reap's or retry's backoff; 0 when not recorded).
WITH ended AS (
    SELECT DISTINCT ON (e.job_id, e.detail ->> 'fence') e.job_id,
           (e.detail ->> 'started_at')::timestamptz AS started_at, e.created_at AS ended_at, e.event,
           coalesce((e.detail ->> 'delay_seconds')::float8, (e.detail ->> 'retry_after')::float8, 0) AS delay
    FROM {schema}.job_events e
    WHERE e.queue_name = %(queue)s AND e.detail ? 'fence' AND e.detail ? 'started_at'
    ORDER BY e.job_id, e.detail ->> 'fence', e.id
), attempts AS (
    SELECT job_id, started_at, ended_at, event, delay FROM ended
    UNION ALL
    SELECT id, started_at, NULL, NULL, 0 FROM {schema}.jobs WHERE queue_name = %(queue)s AND status = 'running'
), cancels AS (
    SELECT job_id, min(created_at) AS at FROM {schema}.job_events
    WHERE queue_name = %(queue)s AND event = 'cancelled' AND detail ->> 'previous_status' = 'pending'
    GROUP BY job_id
)
SELECT j.id AS job_id, j.flow_key, j.rate_limit, j.rate_units,
       extract(epoch FROM j.created_at)::float8 AS created_at,
       extract(epoch FROM c.at)::float8 AS cancelled_pending_at,
       extract(epoch FROM a.started_at)::float8 AS started_at,
       extract(epoch FROM a.ended_at)::float8 AS ended_at, a.event, a.delay
FROM {schema}.all_jobs j
LEFT JOIN attempts a ON a.job_id = j.id
LEFT JOIN cancels c ON c.job_id = j.id
WHERE j.queue_name = %(queue)s
ORDER BY a.started_at NULLS LAST, j.id;

-- name: chaos_capacity_samples
-- Every per-worker held-job sample of the run, oldest first.
SELECT extract(epoch FROM sampled_at)::float8 AS sampled_at, worker_id, pid, concurrency, held, tokens
FROM {schema}.chaos_capacity_samples ORDER BY id;

-- name: chaos_history_lock_limits
-- The slow_completions fault's transaction: how long it waits for its lock, and how long the server lets it sit idle holding it (should the harness stall).
SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout,
       set_config('idle_in_transaction_session_timeout', %(idle_timeout)s, true) AS idle_timeout;

-- name: chaos_history_lock
-- Lock job_history, and so every partition (LOCK recurses), in ACCESS EXCLUSIVE mode until the transaction ends: every completion, which inserts into it, waits.
LOCK TABLE {schema}.job_history IN ACCESS EXCLUSIVE MODE;

-- name: chaos_lease_sample
-- Remember the latest lease expiry seen for every running attempt (a sound lower bound for the no-early-reap check).
INSERT INTO {schema}.chaos_lease_samples AS s (lock_token, job_id, max_lease_expires_at, last_sampled_at)
SELECT lock_token, id, lease_expires_at, now() FROM {schema}.jobs
WHERE status = 'running' AND lock_token IS NOT NULL
ON CONFLICT (lock_token) DO UPDATE
SET max_lease_expires_at = greatest(s.max_lease_expires_at, excluded.max_lease_expires_at),
    last_sampled_at = excluded.last_sampled_at;

-- name: chaos_progress
-- Jobs of the run by state: total, terminal, running, pending.
SELECT count(*)::int AS total,
       count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled'))::int AS terminal,
       count(*) FILTER (WHERE status = 'running')::int AS running,
       count(*) FILTER (WHERE status = 'pending')::int AS pending
FROM {schema}.all_jobs WHERE queue_name = %(queue)s;

-- name: chaos_jobs_summary
-- One row per job: state, cause, completions and their tokens, the final claim's token, effect counts.
-- Attempts are counted from their attempt records (the event that ended each attempt, with its fence in
-- `detail`) plus the attempt running now; `claimed` rows of older versions still count. The final claim
-- is the attempt with the highest fence. `unrecorded_tokens`: tokens of rejected writes that no attempt
-- record explains (an attempt that ended without its record, or a token that never was a claim).
WITH ev AS (
    SELECT job_id,
           count(*) FILTER (WHERE event = 'claimed' OR (detail ? 'fence' AND event IN (
               'completed', 'retry_scheduled', 'dead_lettered', 'released', 'deferred',
               'reaped_due_to_expired_lease', 'reaped_to_dead_letter', 'cancelled'))) AS claims,
           count(*) FILTER (WHERE event = 'completed') AS completions,
           array_agg(lock_token ORDER BY id) FILTER (WHERE event = 'completed') AS completion_tokens,
           (array_agg(lock_token ORDER BY (detail ->> 'fence')::bigint DESC)
               FILTER (WHERE detail ? 'fence'))[1] AS final_record_token,
           max((detail ->> 'fence')::bigint) AS final_record_fence,
           (array_agg(lock_token ORDER BY id DESC) FILTER (WHERE event = 'claimed'))[1] AS final_claimed_event_token,
           array_agg(DISTINCT lock_token) FILTER (WHERE detail ? 'fence' OR event = 'claimed') AS attempt_tokens,
           array_agg(DISTINCT lock_token) FILTER (WHERE event IN (
               'stale_completion_rejected', 'stale_write_rejected', 'heartbeat_lost')) AS rejected_tokens
    FROM {schema}.job_events GROUP BY job_id
), eff AS (
    SELECT job_id,
           count(*) FILTER (WHERE kind = 'guarded') AS guarded,
           count(*) FILTER (WHERE kind = 'guarded_provider_dedup') AS provider_dedups,
           count(*) FILTER (WHERE kind = 'unguarded') AS unguarded
    FROM {schema}.chaos_effects GROUP BY job_id
)
SELECT j.id, (j.payload ->> 'n')::int AS n, j.payload ->> 'fault' AS planned_fault, j.status::text AS status,
       j.last_error_code, j.attempt_count, j.lease_expiry_count,
       (coalesce(ev.claims, 0) + CASE WHEN j.status = 'running' THEN 1 ELSE 0 END)::int AS claims,
       coalesce(ev.completions, 0)::int AS completions,
       coalesce(ev.completion_tokens, '{}'::uuid[]) AS completion_tokens,
       CASE WHEN j.status = 'running' THEN j.lock_token
            WHEN ev.final_record_token IS NOT NULL THEN ev.final_record_token
            ELSE ev.final_claimed_event_token END AS final_claim_token,
       coalesce((SELECT array_agg(t) FROM unnest(ev.rejected_tokens) t
                 WHERE t IS NOT NULL AND NOT (t = ANY(coalesce(ev.attempt_tokens, '{}'::uuid[])))
                   AND t IS DISTINCT FROM j.lock_token), '{}'::uuid[]) AS unrecorded_tokens,
       coalesce(eff.guarded, 0)::int AS guarded, coalesce(eff.provider_dedups, 0)::int AS provider_dedups,
       coalesce(eff.unguarded, 0)::int AS unguarded,
       (x.status = 'succeeded') AS execution_succeeded
FROM {schema}.all_jobs j
LEFT JOIN ev ON ev.job_id = j.id
LEFT JOIN eff ON eff.job_id = j.id
LEFT JOIN {schema}.job_executions x ON x.idempotency_key = 'chaos:' || (j.payload ->> 'n') || ':v1'
WHERE j.queue_name = %(queue)s
ORDER BY j.id;

-- name: chaos_reaps
-- Every reap with its attempt's claim, owner, the latest lease expiry ever sampled, when its handler returned (if it did), and what that token wrote afterwards.
SELECT r.id AS event_id, r.job_id, r.event, r.lock_token, r.detail,
       extract(epoch FROM r.created_at)::float8 AS reaped_at,
       extract(epoch FROM coalesce((r.detail ->> 'started_at')::timestamptz, c.created_at))::float8 AS claimed_at,
       coalesce(r.detail ->> 'owner', c.worker_id) AS worker_id, w.pid,
       extract(epoch FROM s.max_lease_expires_at)::float8 AS sampled_lease_expires_at,
       (SELECT extract(epoch FROM x.returned_at)::float8 FROM {schema}.chaos_returns x
         WHERE x.lock_token = r.lock_token) AS returned_at,
       (SELECT count(*) FROM {schema}.job_events a
         WHERE a.job_id = r.job_id AND a.lock_token = r.lock_token AND a.id > r.id
           AND a.event IN ('completed', 'retry_scheduled', 'dead_lettered', 'released', 'deferred'))::int
           AS accepted_after,
       (SELECT count(*) FROM {schema}.job_events a
         WHERE a.job_id = r.job_id AND a.lock_token = r.lock_token
           AND a.event IN ('stale_completion_rejected', 'stale_write_rejected', 'heartbeat_lost'))::int
           AS rejections_recorded,
       (SELECT f.kind FROM {schema}.chaos_fences f WHERE f.lock_token = r.lock_token) AS worker_fence
FROM {schema}.job_events r
LEFT JOIN {schema}.job_events c ON c.job_id = r.job_id AND c.lock_token = r.lock_token AND c.event = 'claimed'
LEFT JOIN {schema}.workers w ON w.id = coalesce(r.detail ->> 'owner', c.worker_id)
LEFT JOIN {schema}.chaos_lease_samples s ON s.lock_token = r.lock_token
WHERE r.event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter') AND r.queue_name = %(queue)s
ORDER BY r.id;

-- name: chaos_faults_list
-- Every injected fault, with the owning worker's pid for job-level faults.
SELECT id, kind, pid, job_id, lock_token, detail,
       extract(epoch FROM started_at)::float8 AS started_at,
       extract(epoch FROM ended_at)::float8 AS ended_at
FROM {schema}.chaos_faults ORDER BY id;

-- name: chaos_event_counts
-- Audit events of the run by type (claims, completions, rejected stale writes, reaps...).
SELECT event, count(*)::int AS n FROM {schema}.job_events WHERE queue_name = %(queue)s GROUP BY event ORDER BY event;

-- name: chaos_clock_offsets
-- Per worker process, how far its wall clock was from the database clock when it wrote effects.
SELECT pid, count(*)::int AS samples,
       avg(extract(epoch FROM worker_wall - created_at))::float8 AS offset_seconds
FROM {schema}.chaos_effects GROUP BY pid ORDER BY pid;

-- name: chaos_workers
-- The worker registry's pid for each worker id (to tie attempts to processes).
SELECT id, pid FROM {schema}.workers;

-- name: chaos_running_by_pid
-- Running attempts per worker process (to aim SIGSTOP and partitions at workers holding jobs).
SELECT w.pid, count(*)::int AS running
FROM {schema}.jobs j JOIN {schema}.workers w ON w.id = j.locked_by
WHERE j.status = 'running' GROUP BY w.pid;

-- name: chaos_pick_for_cancel
-- One running job of the run (a pending one when none runs), chosen by a random fraction; never a job planned to meet another fault (payload `fault`), whose own recovery the run must see.
WITH c AS (
    SELECT id, status FROM {schema}.jobs
    WHERE queue_name = %(queue)s AND status IN ('running', 'pending') AND NOT payload ? 'fault'
), ranked AS (
    SELECT id, row_number() OVER (ORDER BY (status = 'running') DESC, id) AS r,
           count(*) FILTER (WHERE status = 'running') OVER () AS running, count(*) OVER () AS total
    FROM c
)
SELECT id FROM ranked
WHERE r = 1 + floor(%(fraction)s::float8 * CASE WHEN running > 0 THEN running ELSE total END)::int;

-- name: chaos_claims_between
-- Attempts of the queue that started inside a window (a paused queue must have none): a claim writes no audit row, so an attempt's start is read from its jobs row (the running or last attempt) and from the record that ended it.
SELECT count(*)::int AS n FROM (
    SELECT id AS job_id, started_at FROM {schema}.all_jobs
    WHERE queue_name = %(queue)s AND started_at > to_timestamp(%(start)s) AND started_at < to_timestamp(%(end)s)
    UNION
    SELECT job_id, (detail ->> 'started_at')::timestamptz FROM {schema}.job_events
    WHERE queue_name = %(queue)s AND detail ? 'started_at'
      AND (detail ->> 'started_at')::timestamptz > to_timestamp(%(start)s)
      AND (detail ->> 'started_at')::timestamptz < to_timestamp(%(end)s)
) a;

-- name: chaos_timeout_jobs
-- Jobs with a retry or dead-letter caused by a task timeout.
SELECT DISTINCT job_id FROM {schema}.job_events
WHERE queue_name = %(queue)s AND event IN ('retry_scheduled', 'dead_lettered') AND reason = 'task_timeout';

-- name: chaos_ha_setup
-- Create the HA run's tables: the write probe (on the cluster) or the ledger (on the harness's own server, outside the cluster).
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.chaos_ledger (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL CHECK (kind IN ('enqueue_acked', 'handler_start', 'provider_call',
                                                     'effect_acked', 'completion_acked')),
    job_n       integer     NOT NULL,
    job_id      bigint,
    lock_token  uuid,
    idem_key    text,
    applied     boolean,
    pid         integer,
    at          float8      NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);
CREATE UNIQUE INDEX IF NOT EXISTS chaos_ledger_provider_key ON {schema}.chaos_ledger (idem_key)
    WHERE kind = 'provider_call' AND applied;
CREATE TABLE IF NOT EXISTS {schema}.chaos_probe (
    id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at  timestamptz NOT NULL DEFAULT now()
);

-- name: chaos_ha_probe
-- A write on whichever server the multi-host DSN reached: which server took it (fails on a standby).
INSERT INTO {schema}.chaos_probe DEFAULT VALUES
RETURNING host(inet_server_addr()) AS host, inet_server_port() AS port;

-- name: chaos_ledger_record
-- Append one fact to the HA run's ledger (outside the cluster: it survives every failover).
INSERT INTO {schema}.chaos_ledger (kind, job_n, job_id, lock_token, pid)
VALUES (%(kind)s, %(n)s, %(job_id)s, %(token)s, %(pid)s);

-- name: chaos_ledger_provider_call
-- The external provider of the guarded effect, honouring its idempotency key: applied once, a repeat is logged as deduplicated.
INSERT INTO {schema}.chaos_ledger (kind, job_n, job_id, lock_token, idem_key, applied, pid)
SELECT 'provider_call', %(n)s, %(job_id)s, %(token)s, %(key)s,
       NOT EXISTS (SELECT 1 FROM {schema}.chaos_ledger
                   WHERE kind = 'provider_call' AND applied AND idem_key = %(key)s), %(pid)s
RETURNING applied;

-- name: chaos_ledger_rows
-- Every ledger fact, oldest first, for the end-of-run checks.
SELECT kind, job_n, job_id, lock_token::text AS lock_token, idem_key, applied, pid, at
FROM {schema}.chaos_ledger ORDER BY id;

-- name: chaos_unique_sample
-- One snapshot of the unique keys held by pending or running jobs: how many, and the most holders one key has (unique_keys_held_once).
INSERT INTO {schema}.chaos_unique_samples (sampled_at, keys_held, max_holders, unique_key)
SELECT now(), count(*)::int, coalesce(max(n), 0)::int, (array_agg(unique_key ORDER BY n DESC))[1]
FROM (SELECT unique_key, count(*) AS n FROM {schema}.jobs
      WHERE status IN ('pending', 'running') AND unique_key IS NOT NULL GROUP BY unique_key) g;

-- name: chaos_unique_samples
-- Every unique-key sample of the run, oldest first, and the keys held twice at the end (rows with at_end true).
SELECT extract(epoch FROM sampled_at)::float8 AS sampled_at, keys_held, max_holders, unique_key, false AS at_end
FROM {schema}.chaos_unique_samples
UNION ALL
SELECT extract(epoch FROM clock_timestamp())::float8, 1, count(*)::int, unique_key, true FROM {schema}.jobs
WHERE status IN ('pending', 'running') AND unique_key IS NOT NULL
GROUP BY unique_key HAVING count(*) > 1
ORDER BY at_end, sampled_at;

-- name: chaos_unique_jobs
-- The unique jobs of the queue by state (figures of unique_keys_held_once).
SELECT status::text AS status, count(*)::int AS n FROM {schema}.all_jobs
WHERE queue_name = %(queue)s AND unique_key IS NOT NULL GROUP BY status ORDER BY status;

-- name: chaos_workflow_steps
-- Every workflow step of the queue: its state, flags, release, cancel reason, completion, deps, and its released and cancelled events (workflow_released_once, workflows_finished).
SELECT j.id AS job_id, s.workflow_id, s.name, j.status::text AS status, s.ignore_failed, s.ignore_cancelled,
       s.cancel_reason,
       (SELECT extract(epoch FROM max(e.created_at))::float8 FROM {schema}.job_events e
        WHERE e.job_id = s.job_id AND e.event = 'released') AS released_at,
       extract(epoch FROM j.completed_at)::float8 AS completed_at,
       coalesce((SELECT array_agg(d.dep_id ORDER BY d.dep_id) FROM {schema}.workflow_deps d WHERE d.job_id = j.id),
                '{}'::bigint[]) AS deps,
       (SELECT count(*) FROM {schema}.job_events e WHERE e.job_id = j.id AND e.event = 'released')::int AS released,
       (SELECT count(*) FROM {schema}.job_events e WHERE e.job_id = j.id AND e.event = 'resumed')::int AS resumed
FROM {schema}.workflow_steps s
JOIN {schema}.all_jobs j ON j.id = s.job_id
WHERE j.queue_name = %(queue)s
ORDER BY s.workflow_id, j.id;

-- name: chaos_workflow_attempts
-- Every attempt start of the queue's workflow steps: from the record that ended it (`detail.started_at`, as in chaos_attempts) and from the job's row (its last or running attempt) (workflow_deps_first).
SELECT e.job_id, extract(epoch FROM (e.detail ->> 'started_at')::timestamptz)::float8 AS started_at
FROM {schema}.job_events e JOIN {schema}.workflow_steps s ON s.job_id = e.job_id
WHERE e.queue_name = %(queue)s AND e.detail ? 'started_at'
UNION
SELECT j.id, extract(epoch FROM j.started_at)::float8 FROM {schema}.all_jobs j
JOIN {schema}.workflow_steps s ON s.job_id = j.id
WHERE j.queue_name = %(queue)s AND j.started_at IS NOT NULL
ORDER BY 1, 2;

-- name: chaos_batches
-- Every batch whose callbacks run on the queue: its callbacks, what fired, whether it finished, and its jobs by state (callbacks_once).
SELECT b.id, b.callbacks, b.fired, b.finished_at IS NOT NULL AS finished,
       count(a.id)::int AS total,
       (count(*) FILTER (WHERE a.status = 'completed'))::int AS completed,
       (count(*) FILTER (WHERE a.status = 'failed'))::int AS failed,
       (count(*) FILTER (WHERE a.status = 'cancelled'))::int AS cancelled,
       (count(*) FILTER (WHERE a.status IN ('waiting', 'pending', 'running')))::int AS unfinished
FROM {schema}.batches b
LEFT JOIN {schema}.all_jobs a ON a.batch_id = b.id
WHERE b.callback_queue = %(queue)s
GROUP BY b.id ORDER BY b.id;

-- name: chaos_batch_callbacks
-- Every batch callback enqueued on the queue (by its batch_callback_enqueued event): its batch, kind, how often that event and a completion were recorded for it, and its state (callbacks_once).
SELECT (e.detail ->> 'batch_id')::bigint AS batch_id, e.reason AS kind, e.job_id,
       count(*) OVER (PARTITION BY e.job_id)::int AS enqueued,
       (SELECT count(*) FROM {schema}.job_events c WHERE c.job_id = e.job_id AND c.event = 'completed')::int
           AS completions,
       (SELECT a.status::text FROM {schema}.all_jobs a WHERE a.id = e.job_id) AS status
FROM {schema}.job_events e
WHERE e.queue_name = %(queue)s AND e.event = 'batch_callback_enqueued'
ORDER BY e.id;
