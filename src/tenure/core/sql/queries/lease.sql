-- The lease protocol (R1-R5): the claim (and its queue gate), the worker's heartbeat and the
-- token-fenced writes that end or move an attempt (complete, retry, dead-letter, release,
-- checkpoint); a rejected stale write is recorded in job_events and changes nothing (R2).
-- Run by src/tenure/core/repository/lease.py (LeaseQueries); `tenure sqs` claims with job_claim too.
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_claim
-- Claim up to `limit` ready jobs atomically (SKIP LOCKED): paused queues skipped, jobs ready longer than `aging` first (oldest first), then by priority; fresh token and fence per job, lease from the DB clock (R1).
-- One autocommit statement, the hot path. A requested queue with a running limit (a global
-- max_running, a per_key_running or a flow_keys row) makes it claim nothing and return one marker
-- row (all NULL) instead: the caller then claims with job_claim_gated, after queue_claim_gate in the
-- same transaction. Each queue (in the order given) is one index probe for the aged lane
-- (jobs_ready_idx) and one scan of the rest in priority order (jobs_ready_priority_idx); the lanes
-- are disjoint by available_at, so a row is never taken twice.
-- A running attempt is recorded on its jobs row (owner, token, fence, started_at); its audit row (the attempt
-- record) is written once, by whatever ends the attempt, so a claim inserts nothing into job_events.
WITH q AS (
    SELECT u.name, u.ord,
           s.max_running IS NOT NULL OR s.per_key_running IS NOT NULL
               OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = u.name) AS limited,
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
            WHERE status = 'pending' AND queue_name = q.name AND available_at <= now()
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
-- Claim up to `limit` ready jobs of queues with a running limit, after queue_claim_gate in the same transaction: each queue capped by max_running minus its running count, and a queue with per-key limits never past any key's limit; otherwise as job_claim.
-- The gate's lock means every count below sees every committed claim of the queue.
-- A queue with per-key limits (`keyed`: a per_key_running or a flow_keys row) scans the same lanes
-- as job_claim but skips the jobs of keys already at their limit (counted from live running rows,
-- jobs_flow_running_idx), locks up to 4x its room as candidates, and keeps, per key, no more than
-- the key's room, in lane order. A running job counts until whatever ends its lease ends it; a
-- refused late write frees nothing. The caller claims again in the same transaction when a pass
-- comes back short (a key with a long run at the head). Kept apart from job_claim: the per-key
-- lane's plan costs the hot statement about 0.6 ms a claim to plan even when it is not taken.
WITH q AS (
    SELECT u.name, u.ord,
           s.per_key_running IS NOT NULL
               OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = u.name) AS keyed,
           s.per_key_running,
           CASE WHEN s.max_running IS NULL THEN %(limit)s::int
                ELSE greatest(0, least(%(limit)s::int, s.max_running - (
                    SELECT count(*)::int FROM {schema}.jobs r
                    WHERE r.status = 'running' AND r.queue_name = u.name))) END AS room
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS u(name, ord)
    LEFT JOIN {schema}.queues s ON s.name = u.name
    WHERE s.paused IS NOT TRUE
    ORDER BY u.ord
), picked AS (
    SELECT x.id FROM q CROSS JOIN LATERAL (
        SELECT a.id FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name AND NOT q.keyed
              AND available_at <= now() - make_interval(secs => %(aging)s)
            ORDER BY available_at, id
            LIMIT q.room FOR UPDATE SKIP LOCKED) a
        UNION ALL
        SELECT r.id FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name AND NOT q.keyed AND available_at <= now()
              AND available_at > now() - make_interval(secs => %(aging)s)
            ORDER BY priority DESC, available_at, id
            LIMIT q.room FOR UPDATE SKIP LOCKED) r
        UNION ALL
        SELECT k.id FROM (
            WITH running AS (
                SELECT r.flow_key, count(*)::int AS n, coalesce(min(f.running), q.per_key_running) AS cap
                FROM {schema}.jobs r
                LEFT JOIN {schema}.flow_keys f ON f.queue_name = q.name AND f.flow_key = r.flow_key
                WHERE r.status = 'running' AND r.queue_name = q.name AND r.flow_key IS NOT NULL AND q.keyed
                GROUP BY r.flow_key
            ), full_keys AS (
                SELECT flow_key FROM running WHERE n >= cap
            ), candidates AS (
                SELECT c.id, c.flow_key, row_number() OVER () AS lane_order FROM (
                    SELECT a.id, a.flow_key FROM (
                        SELECT id, flow_key FROM {schema}.jobs
                        WHERE status = 'pending' AND queue_name = q.name AND q.keyed
                          AND available_at <= now() - make_interval(secs => %(aging)s)
                          AND (flow_key IS NULL OR flow_key NOT IN (SELECT flow_key FROM full_keys))
                        ORDER BY available_at, id
                        LIMIT 4 * q.room FOR UPDATE SKIP LOCKED) a
                    UNION ALL
                    SELECT r.id, r.flow_key FROM (
                        SELECT id, flow_key FROM {schema}.jobs
                        WHERE status = 'pending' AND queue_name = q.name AND q.keyed AND available_at <= now()
                          AND available_at > now() - make_interval(secs => %(aging)s)
                          AND (flow_key IS NULL OR flow_key NOT IN (SELECT flow_key FROM full_keys))
                        ORDER BY priority DESC, available_at, id
                        LIMIT 4 * q.room FOR UPDATE SKIP LOCKED) r
                    LIMIT 4 * q.room
                ) c
            ), ranked AS (
                SELECT c.id, c.flow_key, c.lane_order,
                       row_number() OVER (PARTITION BY c.flow_key ORDER BY c.lane_order) AS nth
                FROM candidates c
            )
            SELECT d.id FROM ranked d
            LEFT JOIN running rn ON rn.flow_key = d.flow_key
            LEFT JOIN {schema}.flow_keys f ON f.queue_name = q.name AND f.flow_key = d.flow_key
            WHERE d.flow_key IS NULL OR coalesce(f.running, q.per_key_running) IS NULL
               OR d.nth <= coalesce(f.running, q.per_key_running) - coalesce(rn.n, 0)
            ORDER BY d.lane_order
            LIMIT q.room) k
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

-- name: queue_claim_gate
-- Lock the control rows of the claimed queues that have a running limit (global, per key, or for one key), in name order, so limited claims serialise and the next statement counts every committed claim; returns their names, and whether each has per-key limits.
SELECT s.name, s.per_key_running IS NOT NULL
                  OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = s.name) AS keyed
FROM {schema}.queues s
WHERE s.name = ANY(%(queues)s::text[]) AND NOT s.paused
  AND (s.max_running IS NOT NULL OR s.per_key_running IS NOT NULL
       OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = s.name))
ORDER BY s.name
FOR UPDATE OF s;

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
        created_at, updated_at, priority, cancelled_at, trace_context, flow_key)
    SELECT id, queue_name, task, payload, payload_version, 'completed', attempt_count, max_attempts,
           lease_expiry_count, fence, available_at, started_at, now(), failed_at, first_failed_at,
           last_failed_at, now(), NULL, NULL, NULL, idempotency_key,
           correlation_id, last_error, last_error_code, checkpoint_step, checkpoint_data, checkpoint_at,
           created_at, now(), priority, cancelled_at, trace_context, flow_key
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
