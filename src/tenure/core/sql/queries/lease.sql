-- The lease protocol (R1-R5): the worker's heartbeat and the token-fenced writes that end or move
-- an attempt (complete, retry, dead-letter, release, rate-limited, checkpoint); a rejected stale
-- write is recorded in job_events and changes nothing (R2). The claims are in claim.sql.
-- Run by src/tenure/core/repository/lease.py (LeaseQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_heartbeat
-- Renew every lease a worker holds in one statement (CAS per job on its token), bounded by the max total lease (R3, R4).
-- A row another transaction has locked is skipped, not waited for (`busy`): this worker's own
-- completion of it may be in progress, blocked behind a lock elsewhere, and a heartbeat that
-- waited would leave every other lease unrenewed. A locked row is safe from the reaper (it skips
-- locked rows) and is renewed at the next beat if it is still there.
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS h(id, token)
), lockable AS (
    SELECT j.id FROM {schema}.jobs j JOIN held ON j.id = held.id
    WHERE j.status = 'running' AND j.locked_by = %(worker_id)s AND j.lock_token = held.token
    FOR UPDATE OF j SKIP LOCKED
), renewed AS (
    UPDATE {schema}.jobs j
    SET last_heartbeat_at = now(),
        lease_expires_at = least(now() + make_interval(secs => %(lease)s),
                                 j.started_at + make_interval(secs => %(max_lease_total)s)),
        updated_at = now()
    FROM held, lockable
    WHERE j.id = lockable.id AND j.id = held.id AND j.status = 'running' AND j.locked_by = %(worker_id)s
      AND j.lock_token = held.token
      AND j.started_at + make_interval(secs => %(max_lease_total)s) > now()
    RETURNING j.id, j.lock_token, j.lease_expires_at
), effects AS (
    -- Effects still in flight keep their key while this worker lives, even after the job's
    -- lease is lost, bounded by max_effect_hold; a dead worker's keys expire with its beats.
    UPDATE {schema}.job_executions e
    SET lease_until = least(now() + make_interval(secs => %(lease)s),
                            e.claimed_at + make_interval(secs => %(max_effect_hold)s)),
        updated_at = now()
    WHERE e.status = 'processing' AND e.lock_token = ANY(%(effect_tokens)s::uuid[])
      AND e.claimed_at + make_interval(secs => %(max_effect_hold)s) > now()
), seen AS (
    UPDATE {schema}.workers SET last_seen_at = now(), abandoned_threads = %(abandoned)s::int WHERE id = %(worker_id)s
)
SELECT h.id,
       CASE WHEN r.id IS NOT NULL THEN 'renewed'
            WHEN l.id IS NOT NULL THEN 'max_lease_reached'
            WHEN j.lock_token = h.token AND j.status = 'running' THEN 'busy'
            WHEN j.status = 'cancelled' THEN 'cancelled'
            ELSE 'lost' END AS outcome,
       r.lease_expires_at,
       extract(epoch FROM r.lease_expires_at - now())::float8 AS remaining_seconds
FROM held h
LEFT JOIN renewed r ON r.id = h.id
LEFT JOIN lockable l ON l.id = h.id
LEFT JOIN {schema}.jobs j ON j.id = h.id;

-- name: job_completion_recheck
-- After a reconnect: whether the database holds each acknowledged completion (its `completed` event with the token), and whether the token still holds the job.
SELECT d.id, d.token,
       EXISTS (SELECT 1 FROM {schema}.job_events e
               WHERE e.job_id = d.id AND e.event = 'completed' AND e.lock_token = d.token) AS held,
       (j.status::text = 'running' AND j.lock_token = d.token) AS token_current
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
LEFT JOIN {schema}.jobs j ON j.id = d.id;

-- name: job_complete_many
-- Complete a batch of jobs, each a CAS on (id, running, worker, token), moving each from `jobs` into `job_history`; returns the (id, token) pairs it accepted.
-- The `completed` row is the attempt record: token, worker, attempt, and in `detail` its fence and start.
-- The job leaves the hot table in this statement (0009): claims never step over completed rows.
-- Its idempotency key is (re)claimed in job_keys, for jobs enqueued by a tenure older than 0009.
-- Ids are paired with tokens by one unnest, joined to `jobs` by primary key: one index probe per
-- id and no per-row array search, so the statement is linear in its batch (issue 40: a per-row
-- array_position made it quadratic). An id given twice (two attempts of one job) is judged per
-- token. Compared as text, `status` matches no partial index, so the primary key is the probe
-- whatever the statistics of the running index say. Refused pairs are the caller's to record
-- (job_stale_completion_record): a join of the batch against what this statement moved was planned
-- as a nested loop over both, quadratic again.
WITH moved AS (
    DELETE FROM {schema}.jobs j
    USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
    WHERE j.id = d.id AND j.status::text = 'running' AND j.locked_by = %(worker_id)s AND j.lock_token = d.token
    RETURNING j.*
), archived AS (
    INSERT INTO {schema}.job_history (
        id, queue_name, task, payload, payload_version, status, attempt_count, max_attempts,
        lease_expiry_count, fence, available_at, started_at, completed_at, failed_at, first_failed_at,
        last_failed_at, last_heartbeat_at, lease_expires_at, locked_by, lock_token, idempotency_key,
        correlation_id, last_error, last_error_code, checkpoint_step, checkpoint_data, checkpoint_at,
        created_at, updated_at, priority, cancelled_at, trace_context, flow_key, rate_limit, rate_units,
        unique_key, unique_states, workflow_id, batch_id)
    SELECT id, queue_name, task, payload, payload_version, 'completed', attempt_count, max_attempts,
           lease_expiry_count, fence, available_at, started_at, now(), failed_at, first_failed_at,
           last_failed_at, now(), NULL, NULL, NULL, idempotency_key,
           correlation_id, last_error, last_error_code, checkpoint_step, checkpoint_data, checkpoint_at,
           created_at, now(), priority, cancelled_at, trace_context, flow_key, rate_limit, rate_units,
           unique_key, unique_states, workflow_id, batch_id
    FROM moved
), keys AS (
    INSERT INTO {schema}.job_keys (idempotency_key, created_at)
    SELECT idempotency_key, created_at FROM moved WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING moved m WHERE r.job_id = m.id
), accepted AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, detail)
    SELECT id, queue_name, 'completed', lock_token, %(worker_id)s, attempt_count,
           jsonb_build_object('fence', fence, 'started_at', started_at)
    FROM moved
)
SELECT id, lock_token FROM moved;

-- name: job_stale_completion_record
-- Record completions the token CAS refused (stale attempts): one `stale_completion_rejected` row per (id, token), with the stale attempt's own number.
INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason)
SELECT d.id, coalesce(j.queue_name, ''), 'stale_completion_rejected', d.token, %(worker_id)s,
       -- the stale attempt's own number (the job's count has moved on): from the record that
       -- ended that attempt (a `claimed` row before issue 13), else from the row it still holds
       coalesce((SELECT c.attempt FROM {schema}.job_events c
                 WHERE c.job_id = d.id AND c.lock_token = d.token
                   AND (c.event = 'claimed' OR c.detail ? 'fence') ORDER BY c.id LIMIT 1),
                CASE WHEN j.lock_token = d.token THEN j.attempt_count END),
       'token no longer current'
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
LEFT JOIN {schema}.all_jobs j ON j.id = d.id;

-- name: job_retry
-- Reschedule one failed attempt with a backoff delay (CAS on the token); records the classified error.
WITH updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now() + make_interval(secs => %(delay)s),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL,
        last_error = %(error)s, last_error_code = %(error_code)s,
        first_failed_at = coalesce(j.first_failed_at, now()), last_failed_at = now(),
        updated_at = now()
    WHERE j.id = %(id)s AND j.status = 'running' AND j.locked_by = %(worker_id)s
      AND j.lock_token = %(token)s
    RETURNING j.id, j.queue_name, j.attempt_count, j.fence, j.started_at, j.last_heartbeat_at
), event AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, 'retry_scheduled', %(token)s, %(worker_id)s, attempt_count, %(error_code)s,
           jsonb_build_object('delay_seconds', %(delay)s::float8, 'fence', fence, 'started_at', started_at,
                              'last_heartbeat_at', last_heartbeat_at, 'error', %(error)s::text)
    FROM updated
)
SELECT count(*)::int AS accepted FROM updated;

-- name: job_dead_letter
-- Move one running job to the dead-letter queue (status failed) with its error code (CAS on the token).
WITH updated AS (
    UPDATE {schema}.jobs j
    SET status = 'failed', failed_at = now(),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL,
        last_error = %(error)s, last_error_code = %(error_code)s,
        payload = coalesce(%(sanitised_payload)s::jsonb, j.payload),
        first_failed_at = coalesce(j.first_failed_at, now()), last_failed_at = now(),
        updated_at = now()
    WHERE j.id = %(id)s AND j.status = 'running' AND j.locked_by = %(worker_id)s
      AND j.lock_token = %(token)s
    RETURNING j.id, j.queue_name, j.attempt_count, j.fence, j.started_at, j.last_heartbeat_at
), event AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, 'dead_lettered', %(token)s, %(worker_id)s, attempt_count, %(error_code)s,
           jsonb_build_object('fence', fence, 'started_at', started_at, 'last_heartbeat_at', last_heartbeat_at,
                              'error', %(error)s::text)
    FROM updated
)
SELECT count(*)::int AS accepted FROM updated;

-- name: job_release
-- Hand a running job back without using up an attempt (shutdown drain, effect deferral); CAS on the token.
WITH updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now() + make_interval(secs => %(delay)s),
        attempt_count = greatest(j.attempt_count - 1, 0),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.status = 'running' AND j.locked_by = %(worker_id)s
      AND j.lock_token = %(token)s
    RETURNING j.id, j.queue_name, j.attempt_count, j.fence, j.started_at
), event AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, %(event)s, %(token)s, %(worker_id)s, attempt_count, %(reason)s,
           jsonb_build_object('fence', fence, 'started_at', started_at)
    FROM updated
), notified AS (
    SELECT pg_notify(%(channel)s, queue_name) FROM updated WHERE %(delay)s::float8 <= 0
)
SELECT count(*)::int AS accepted FROM updated WHERE (SELECT count(*) FROM notified) >= 0;

-- name: job_checkpoint
-- Record the last step whose effect is committed (R16); CAS on the token so a stale attempt cannot move it.
UPDATE {schema}.jobs
SET checkpoint_step = %(step)s, checkpoint_data = %(data)s, checkpoint_at = now(), updated_at = now()
WHERE id = %(id)s AND status = 'running' AND locked_by = %(worker_id)s AND lock_token = %(token)s
RETURNING id;

-- name: job_queue_get
-- The queue of one job, wherever it lives (no row when there is no such job).
SELECT queue_name FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: job_event_stale_write
-- Record a rejected stale write (heartbeat, retry, dead-letter, release, checkpoint) of a job of queue `queue` for the audit trail.
-- It reads `jobs` only, never job_history: the heartbeat records lost leases, and must not wait
-- behind a lock on history (issue 40: every other lease would go unrenewed meanwhile).
INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
SELECT %(id)s, %(queue)s::text,
       %(event)s, %(token)s, %(worker_id)s,
       -- the stale attempt's number: from the record that ended it (a `claimed` row before
       -- issue 13), else from the row it still holds
       coalesce((SELECT c.attempt FROM {schema}.job_events c
                 WHERE c.job_id = %(id)s AND c.lock_token = %(token)s
                   AND (c.event = 'claimed' OR c.detail ? 'fence') ORDER BY c.id LIMIT 1),
                (SELECT attempt_count FROM {schema}.jobs WHERE id = %(id)s AND lock_token = %(token)s)),
       %(reason)s, jsonb_build_object('operation', %(operation)s::text);

-- name: job_rate_limit_lookup
-- Whether rate limit `name` exists: ctx.rate_limited checks it before its attempt unwinds.
SELECT name FROM {schema}.rate_limits WHERE name = %(name)s;

-- name: job_rate_limited
-- Back-pressure from a handler (CAS on the token): pending again after `delay` s without using the attempt, a `rate_limited` event, and rate limit `limit` (if any) emptied and paused as long.
-- The bucket: the limit's shared one, or the job's key's ('' without one) if per key; it refills
-- from the end of the pause, a longer pause is kept, and a limit deleted meanwhile pauses nothing.
WITH updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now() + make_interval(secs => %(delay)s),
        attempt_count = greatest(j.attempt_count - 1, 0),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.status = 'running' AND j.locked_by = %(worker_id)s AND j.lock_token = %(token)s
    RETURNING j.id, j.queue_name, j.attempt_count, j.fence, j.started_at, j.flow_key
), event AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, 'rate_limited', %(token)s, %(worker_id)s, attempt_count, %(reason)s,
           jsonb_build_object('fence', fence, 'started_at', started_at, 'retry_after', %(delay)s::float8,
                              'limit', %(limit)s::text)
    FROM updated
), paused AS (
    INSERT INTO {schema}.rate_buckets AS b (limit_name, flow_key, tokens, refilled_at, paused_until)
    SELECT l.name, CASE WHEN l.per_key THEN coalesce(u.flow_key, '') ELSE '' END, 0,
           now() + make_interval(secs => %(delay)s), now() + make_interval(secs => %(delay)s)
    FROM updated u JOIN {schema}.rate_limits l ON l.name = %(limit)s::text
    ON CONFLICT (limit_name, flow_key) DO UPDATE
    SET tokens = 0, refilled_at = greatest(b.refilled_at, excluded.refilled_at),
        paused_until = greatest(b.paused_until, excluded.paused_until)
)
SELECT count(*)::int AS accepted FROM updated;
