-- Claims (R1, and issue 38's flow control): the hot one-statement claim, the gated claim of queues
-- with a running limit, and the fair claim of queues with flow keys or rate limits (flow_claim in
-- schema.sql), with the gates that serialise them.
-- Run by src/tenure/core/repository/claim.py (ClaimQueries); `tenure sqs` claims with job_claim too.
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_claim
-- Claim up to `limit` ready jobs atomically (SKIP LOCKED): paused queues skipped, jobs ready longer than `aging` first (oldest first), then by priority; fresh token and fence per job, lease from the DB clock (R1).
-- One autocommit statement, the hot path. A requested queue with a running limit (a global
-- max_running, a per_key_running or a flow_keys row), or with ready jobs that carry a flow key or
-- name a rate limit (two probes of empty partial indexes on a queue without them), makes it claim
-- nothing and return one marker row (all NULL) instead: the caller then claims gated, after
-- queue_claim_gate in the same transaction (job_claim_gated, and job_claim_flow for a queue with
-- keys or rate limits). Each queue (in the order given) is one index probe for the aged lane
-- (jobs_ready_idx) and one scan of the rest in priority order (jobs_ready_priority_idx, which holds
-- unkeyed jobs only: there are no others here); the lanes are disjoint by available_at, so a row is
-- never taken twice.
-- A running attempt is recorded on its jobs row (owner, token, fence, started_at); its audit row (the attempt
-- record) is written once, by whatever ends the attempt, so a claim inserts nothing into job_events.
WITH q AS (
    SELECT u.name, u.ord,
           s.max_running IS NOT NULL OR s.per_key_running IS NOT NULL
               OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = u.name)
               OR EXISTS (SELECT 1 FROM {schema}.jobs k WHERE k.status = 'pending' AND k.queue_name = u.name
                          AND k.flow_key IS NOT NULL)
               OR EXISTS (SELECT 1 FROM {schema}.jobs k WHERE k.status = 'pending' AND k.queue_name = u.name
                          AND k.rate_limit IS NOT NULL) AS limited,
           %(limit)s::int AS room
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS u(name, ord)
    LEFT JOIN {schema}.queues s ON s.name = u.name
    WHERE s.paused IS NOT TRUE
    ORDER BY u.ord
), blocked AS (
    SELECT coalesce(bool_or(limited), false) AS blocked FROM q
), picked AS (
    SELECT x.id FROM q CROSS JOIN LATERAL (
        SELECT a.id FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name
              AND available_at <= now() - make_interval(secs => %(aging)s)
            ORDER BY available_at, id
            LIMIT q.room FOR UPDATE SKIP LOCKED) a
        UNION ALL
        SELECT r.id FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name AND flow_key IS NULL AND available_at <= now()
              AND available_at > now() - make_interval(secs => %(aging)s)
            ORDER BY priority DESC, available_at, id
            LIMIT q.room FOR UPDATE SKIP LOCKED) r
        LIMIT q.room
    ) x
    WHERE NOT (SELECT blocked FROM blocked)
    LIMIT %(limit)s
), claimed AS (
    UPDATE {schema}.jobs j
    SET status = 'running', started_at = now(), last_heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease)s),
        locked_by = %(worker_id)s, lock_token = gen_random_uuid(),
        fence = nextval('{schema}.job_fence_seq'),
        attempt_count = j.attempt_count + 1, updated_at = now()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.queue_name, j.task, j.payload, j.payload_version, j.attempt_count,
              j.max_attempts, j.lock_token, j.fence, j.idempotency_key, j.correlation_id,
              j.checkpoint_step, j.checkpoint_data, j.lease_expires_at,
              greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds, j.priority,
              j.trace_context, j.flow_key,
              j.available_at <= now() - make_interval(secs => %(aging)s) AS aged, j.available_at
)
(SELECT id, queue_name, task, payload, payload_version, attempt_count, max_attempts, lock_token, fence,
        idempotency_key, correlation_id, checkpoint_step, checkpoint_data, lease_expires_at, wait_seconds, priority,
        trace_context, flow_key
 FROM claimed
 ORDER BY array_position(%(queues)s::text[], queue_name), aged DESC,
          CASE WHEN aged THEN 0 ELSE -priority END, available_at, id)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM blocked WHERE blocked;

-- name: job_claim_gated
-- Claim up to `limit` ready jobs of limited queues without flow keys or rate limits, after queue_claim_gate in the same transaction: each queue capped by max_running minus its running count; otherwise as job_claim.
-- The gate's lock means every count below sees every committed claim of the queue. A queue with
-- per-key limits, weights, or ready jobs that carry a flow key or name a rate limit (`flow`) is
-- left to job_claim_flow. Kept apart from job_claim: a count per queue costs the hot statement.
WITH q AS (
    SELECT u.name, u.ord,
           CASE WHEN s.max_running IS NULL THEN %(limit)s::int
                ELSE greatest(0, least(%(limit)s::int, s.max_running - (
                    SELECT count(*)::int FROM {schema}.jobs r
                    WHERE r.status = 'running' AND r.queue_name = u.name))) END AS room
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS u(name, ord)
    LEFT JOIN {schema}.queues s ON s.name = u.name
    WHERE s.paused IS NOT TRUE
      AND s.per_key_running IS NULL
      AND NOT EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = u.name)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs k WHERE k.status = 'pending' AND k.queue_name = u.name
                      AND k.flow_key IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs k WHERE k.status = 'pending' AND k.queue_name = u.name
                      AND k.rate_limit IS NOT NULL)
    ORDER BY u.ord
), picked AS (
    SELECT x.id FROM q CROSS JOIN LATERAL (
        SELECT a.id FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name
              AND available_at <= now() - make_interval(secs => %(aging)s)
            ORDER BY available_at, id
            LIMIT q.room FOR UPDATE SKIP LOCKED) a
        UNION ALL
        SELECT r.id FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name AND flow_key IS NULL AND available_at <= now()
              AND available_at > now() - make_interval(secs => %(aging)s)
            ORDER BY priority DESC, available_at, id
            LIMIT q.room FOR UPDATE SKIP LOCKED) r
        LIMIT q.room
    ) x
    LIMIT %(limit)s
), claimed AS (
    UPDATE {schema}.jobs j
    SET status = 'running', started_at = now(), last_heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease)s),
        locked_by = %(worker_id)s, lock_token = gen_random_uuid(),
        fence = nextval('{schema}.job_fence_seq'),
        attempt_count = j.attempt_count + 1, updated_at = now()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.queue_name, j.task, j.payload, j.payload_version, j.attempt_count,
              j.max_attempts, j.lock_token, j.fence, j.idempotency_key, j.correlation_id,
              j.checkpoint_step, j.checkpoint_data, j.lease_expires_at,
              greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds, j.priority,
              j.trace_context, j.flow_key,
              j.available_at <= now() - make_interval(secs => %(aging)s) AS aged, j.available_at
)
(SELECT id, queue_name, task, payload, payload_version, attempt_count, max_attempts, lock_token, fence,
        idempotency_key, correlation_id, checkpoint_step, checkpoint_data, lease_expires_at, wait_seconds, priority,
        trace_context, flow_key
 FROM claimed
 ORDER BY array_position(%(queues)s::text[], queue_name), aged DESC,
          CASE WHEN aged THEN 0 ELSE -priority END, available_at, id);

-- name: job_claim_flow
-- Claim up to `limit` ready jobs of one queue with flow keys, weights or rate limits through flow_claim (schema.sql): round-robin over its keys by weight, within every limit; a last row with a NULL id carries, in lease_expires_at, when a rate limit lets a held-back job go.
-- Runs after queue_claim_gate in the same transaction; flow_claim locks the queue's control row
-- itself (creating it), so the claims of the queue serialise and its counts see every claim.
SELECT id, queue_name, task, payload, payload_version, attempt_count, max_attempts, lock_token, fence,
       idempotency_key, correlation_id, checkpoint_step, checkpoint_data, lease_expires_at, wait_seconds, priority,
       trace_context, flow_key
FROM {schema}.flow_claim(%(queue)s, %(limit)s, %(aging)s, %(lease)s, %(worker_id)s);

-- name: queue_flow_lock
-- Lock the control rows of the queues a claim will take with job_claim_flow, in name order, before the first of them, so claims of several such queues never deadlock (queue_flow_rows_create made the rows beforehand).
SELECT s.name FROM {schema}.queues s WHERE s.name = ANY(%(queues)s::text[]) ORDER BY s.name FOR UPDATE;

-- name: queue_flow_rows_create
-- Create, in its own transaction, the control rows of queues about to be claimed by job_claim_flow (which locks them): a claim never waits for another's uncommitted insert of one, which could deadlock.
INSERT INTO {schema}.queues (name)
SELECT n FROM unnest(%(queues)s::text[]) AS n ORDER BY n
ON CONFLICT DO NOTHING;

-- name: queue_claim_gate
-- Lock the control rows of the claimed queues that have a running limit (global, per key, or for one key) or weights, in name order, so limited claims serialise and the next statement counts every committed claim; returns, in the order asked, those queues and the queues with ready jobs that carry a flow key or name a rate limit, whether each is claimed by job_claim_flow, and whether it has a control row.
WITH locked AS (
    SELECT s.name
    FROM {schema}.queues s
    WHERE s.name = ANY(%(queues)s::text[]) AND NOT s.paused
      AND (s.max_running IS NOT NULL OR s.per_key_running IS NOT NULL
           OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = s.name))
    ORDER BY s.name
    FOR UPDATE OF s
), asked AS (
    -- `flow` exactly as job_claim_gated leaves a queue out, so that every queue is claimed by one.
    SELECT u.name, u.ord, l.name IS NOT NULL AS limited, s.name IS NOT NULL AS has_row,
           s.per_key_running IS NOT NULL
               OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = u.name)
               OR EXISTS (SELECT 1 FROM {schema}.jobs k WHERE k.status = 'pending' AND k.queue_name = u.name
                          AND k.flow_key IS NOT NULL)
               OR EXISTS (SELECT 1 FROM {schema}.jobs k WHERE k.status = 'pending' AND k.queue_name = u.name
                          AND k.rate_limit IS NOT NULL) AS flow
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS u(name, ord)
    LEFT JOIN locked l ON l.name = u.name
    LEFT JOIN {schema}.queues s ON s.name = u.name
    WHERE s.paused IS NOT TRUE
)
SELECT name, flow, has_row FROM asked WHERE limited OR flow ORDER BY ord;
