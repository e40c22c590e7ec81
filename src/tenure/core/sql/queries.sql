-- Named queries. Each block starts with `-- name: <entity>_<verb>` and a one-line description.
-- `{schema}` is replaced by the quoted schema name when the file is loaded.
-- Every time comparison uses the database clock (now()), never the worker's clock (R6).

-- name: job_enqueue
-- Insert one job; with an idempotency key, return the existing job (hot or in history) instead of a copy (R13).
-- The key is claimed in job_keys first: it outlives the job's move to history, and two racing
-- enqueues of one key serialise on its primary key. The jobs index still guards keys of jobs
-- enqueued by a tenure older than 0009 (not in job_keys until they move).
WITH key AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT %(idempotency_key)s::text WHERE %(idempotency_key)s::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, payload_version, max_attempts,
                               available_at, idempotency_key, correlation_id, priority, trace_context)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(payload_version)s, %(max_attempts)s,
           now() + make_interval(secs => %(delay)s), %(idempotency_key)s, %(correlation_id)s,
           %(priority)s, %(trace_context)s
    WHERE %(idempotency_key)s::text IS NULL OR EXISTS (SELECT 1 FROM key)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM ins
)
SELECT id, true AS created FROM ins WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT j.id, false AS created FROM {schema}.all_jobs j
WHERE j.idempotency_key = %(idempotency_key)s AND NOT EXISTS (SELECT 1 FROM ins);

-- name: job_enqueue_many
-- Insert a batch of jobs in one statement (arrays, one element per job); duplicates by key are skipped; the new jobs' trace contexts and ids (traced batches name each job id on its span).
WITH input AS (
    SELECT * FROM unnest(%(queues)s::text[], %(tasks)s::text[], %(payloads)s::text[]::jsonb[],
                         %(max_attempts)s::int[], %(delays)s::float8[], %(idempotency_keys)s::text[],
                         %(priorities)s::smallint[], %(trace_contexts)s::text[])
                  WITH ORDINALITY AS t(queue_name, task, payload, max_attempts, delay, idempotency_key, priority,
                                       trace_context, ord)
), keys AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT DISTINCT idempotency_key FROM input WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, available_at, idempotency_key, priority,
                               trace_context)
    SELECT queue_name, task, payload, max_attempts, now() + make_interval(secs => delay), idempotency_key, priority,
           trace_context
    FROM input WHERE idempotency_key IS NULL OR idempotency_key IN (SELECT idempotency_key FROM keys)
    ORDER BY ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue_name, trace_context
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM ins) d
)
SELECT count(*)::int AS inserted,
       array_agg(id) FILTER (WHERE trace_context IS NOT NULL) AS traced_ids,
       array_agg(trace_context) FILTER (WHERE trace_context IS NOT NULL) AS traced_contexts
FROM ins WHERE (SELECT count(*) FROM notified) >= 0;

-- name: queue_claim_gate
-- Lock the control rows of the claimed queues that have a global running limit (in name order), so limited claims serialise and the next statement counts every committed claim; returns their names.
SELECT name FROM {schema}.queues
WHERE name = ANY(%(queues)s::text[]) AND max_running IS NOT NULL AND NOT paused
ORDER BY name
FOR UPDATE;

-- name: job_claim
-- Claim up to `limit` ready jobs atomically (SKIP LOCKED): paused queues skipped, jobs ready longer than `aging` first (oldest first), then by priority; fresh token and fence per job, lease from the DB clock (R1).
-- Ungated (`gated` false: one autocommit statement, the hot path), a requested queue with a global
-- max_running makes it claim nothing and return one marker row (all NULL) instead: the caller then
-- runs it gated, after queue_claim_gate in the same transaction, and each limited queue is capped by
-- max_running minus its running count. Each queue (in the order given) is one index probe for the
-- aged lane (jobs_ready_idx) and one scan of the rest in priority order (jobs_ready_priority_idx);
-- the lanes are disjoint by available_at, so a row is never taken twice.
-- A running attempt is recorded on its jobs row (owner, token, fence, started_at); its audit row (the attempt
-- record) is written once, by whatever ends the attempt, so a claim inserts nothing into job_events.
WITH q AS (
    SELECT u.name, u.ord, s.max_running IS NOT NULL AS limited,
           CASE WHEN s.max_running IS NULL THEN %(limit)s::int
                WHEN NOT %(gated)s::boolean THEN 0
                ELSE greatest(0, least(%(limit)s::int, s.max_running - (
                    SELECT count(*)::int FROM {schema}.jobs r
                    WHERE r.status = 'running' AND r.queue_name = u.name))) END AS room
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS u(name, ord)
    LEFT JOIN {schema}.queues s ON s.name = u.name
    WHERE s.paused IS NOT TRUE
    ORDER BY u.ord
), blocked AS (
    SELECT NOT %(gated)s::boolean AND coalesce(bool_or(limited), false) AS blocked FROM q
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
              j.trace_context,
              j.available_at <= now() - make_interval(secs => %(aging)s) AS aged, j.available_at
)
(SELECT id, queue_name, task, payload, payload_version, attempt_count, max_attempts, lock_token, fence,
        idempotency_key, correlation_id, checkpoint_step, checkpoint_data, lease_expires_at, wait_seconds, priority,
        trace_context
 FROM claimed
 ORDER BY array_position(%(queues)s::text[], queue_name), aged DESC,
          CASE WHEN aged THEN 0 ELSE -priority END, available_at, id)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM blocked WHERE blocked;

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
        created_at, updated_at, priority, cancelled_at, trace_context)
    SELECT id, queue_name, task, payload, payload_version, 'completed', attempt_count, max_attempts,
           lease_expiry_count, fence, available_at, started_at, now(), failed_at, first_failed_at,
           last_failed_at, now(), NULL, NULL, NULL, idempotency_key,
           correlation_id, last_error, last_error_code, checkpoint_step, checkpoint_data, checkpoint_at,
           created_at, now(), priority, cancelled_at, trace_context
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

-- name: job_reap_candidates
-- Lock (SKIP LOCKED) a bounded batch of running jobs whose lease expired more than their owner's registered heartbeat (`floor` if unregistered) plus `grace` ago (R7).
SELECT j.id, j.queue_name, j.lock_token, j.locked_by, j.attempt_count, j.max_attempts,
       j.lease_expiry_count, j.lease_expires_at,
       extract(epoch FROM now() - j.lease_expires_at)::float8 AS expired_for_seconds,
       (%(grace)s::float8 + coalesce(w.heartbeat_seconds, %(floor)s::float8))::float8 AS wait_seconds,
       CASE WHEN w.id IS NULL THEN 'unknown'
            WHEN w.stopped_at IS NOT NULL THEN 'stopped'
            WHEN w.last_seen_at > now() - make_interval(secs => 3 * w.heartbeat_seconds) THEN 'alive'
            ELSE 'silent' END AS owner_status
FROM {schema}.jobs j
LEFT JOIN {schema}.workers w ON w.id = j.locked_by
WHERE j.status = 'running'
  AND j.lease_expires_at < now() - make_interval(secs => %(grace)s::float8
                                                  + coalesce(w.heartbeat_seconds, %(floor)s::float8))
ORDER BY j.lease_expires_at
LIMIT %(batch)s
FOR UPDATE OF j SKIP LOCKED;

-- name: job_reap_expired
-- Requeue (with backoff) or dead-letter the reaped jobs, each a CAS on the token the reaper read; writes the audit event
-- (the attempt record: owner, fence and start in `detail`).
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(delays)s::float8[],
                         %(dead)s::bool[], %(owners)s::text[], %(leases)s::timestamptz[], %(waits)s::float8[])
                  AS t(id, token, delay, dead, owner_status, lease_expires_at, wait_seconds)
), owners AS (
    -- The attempt's owner as it was before this statement (the update below clears locked_by).
    SELECT j.id, j.locked_by FROM {schema}.jobs j WHERE j.id = ANY(%(ids)s::bigint[])
), updated AS (
    UPDATE {schema}.jobs j
    SET status = CASE WHEN i.dead THEN 'failed'::{schema}.job_status ELSE 'pending'::{schema}.job_status END,
        available_at = CASE WHEN i.dead THEN j.available_at ELSE now() + make_interval(secs => i.delay) END,
        failed_at = CASE WHEN i.dead THEN now() ELSE NULL END,
        first_failed_at = coalesce(j.first_failed_at, now()), last_failed_at = now(),
        last_error = 'lease expired (owner ' || i.owner_status || ')',
        last_error_code = 'lease_expired',
        lease_expiry_count = j.lease_expiry_count + 1,
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    FROM input i
    WHERE j.id = i.id AND j.status = 'running' AND j.lock_token = i.token
      -- Re-checked at write time too (a second safeguard besides the row lock): see docs/model.
      AND j.lease_expires_at < now() - make_interval(secs => i.wait_seconds)
    RETURNING j.id, j.queue_name, j.attempt_count, i.token, i.dead, i.owner_status, i.delay,
              i.lease_expires_at, j.fence, j.started_at, j.trace_context, j.last_heartbeat_at
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT u.id, u.queue_name,
           CASE WHEN u.dead THEN 'reaped_to_dead_letter' ELSE 'reaped_due_to_expired_lease' END,
           u.token, %(reaper_id)s, u.attempt_count, 'lease_expired',
           jsonb_build_object('owner_status', u.owner_status, 'delay_seconds', u.delay,
                              'lease_expires_at', u.lease_expires_at, 'grace_seconds', %(grace)s::float8,
                              'owner', o.locked_by, 'fence', u.fence, 'started_at', u.started_at,
                              'last_heartbeat_at', u.last_heartbeat_at)
    FROM updated u LEFT JOIN owners o ON o.id = u.id
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM updated WHERE NOT dead) d
)
SELECT id, queue_name, dead, attempt_count, fence, owner_status, trace_context
FROM updated WHERE (SELECT count(*) FROM notified) >= 0;

-- name: reaper_cycle_record
-- Count one finished reaper cycle (any reaper: CronJob, loop or in-worker) with its duration and jobs reaped, by the DB clock.
INSERT INTO {schema}.reaper_cycles AS c (id, cycles, last_finished_at, last_seconds, last_reaped, last_reaper_id)
VALUES (true, 1, now(), %(seconds)s, %(reaped)s, %(reaper_id)s)
ON CONFLICT (id) DO UPDATE
SET cycles = c.cycles + 1, last_finished_at = now(), last_seconds = excluded.last_seconds,
    last_reaped = excluded.last_reaped, last_reaper_id = excluded.last_reaper_id;

-- name: reaper_cycle_get
-- The reaper cycle counter and the last cycle (no row before any reaper ran), for the exporter.
SELECT cycles, extract(epoch FROM last_finished_at)::float8 AS last_finished_epoch,
       last_seconds, last_reaped
FROM {schema}.reaper_cycles WHERE id;

-- name: job_reap_counts
-- Reaped jobs ever, per queue, outcome (requeued / dead_lettered) and owner status at reap time, from the audited reap events.
SELECT queue_name AS queue,
       CASE WHEN event = 'reaped_to_dead_letter' THEN 'dead_lettered' ELSE 'requeued' END AS outcome,
       coalesce(detail->>'owner_status', 'unknown') AS owner_status,
       count(*)::bigint AS reaped
FROM {schema}.job_events
WHERE event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter')
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: job_queue_get
-- The queue of one job, wherever it lives (no row when there is no such job).
SELECT queue_name FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: job_get
-- One job by id, with the DB clock's view of its lease.
SELECT j.*, now() AS db_now, (j.status = 'running' AND j.lease_expires_at < now()) AS lease_expired
FROM {schema}.all_jobs j WHERE j.id = %(id)s;

-- name: job_events_list
-- The audit trail of one job, oldest first.
SELECT id, event, lock_token, worker_id, attempt, reason, detail, created_at
FROM {schema}.job_events WHERE job_id = %(id)s ORDER BY id;

-- name: queue_work_exists
-- Whether the given queues have pending (ready or scheduled) and running jobs: one probe of each partial index, for a burst worker deciding to exit.
SELECT EXISTS (SELECT 1 FROM {schema}.jobs WHERE status = 'pending' AND queue_name = ANY(%(queues)s::text[])) AS pending,
       EXISTS (SELECT 1 FROM {schema}.jobs WHERE status = 'running' AND queue_name = ANY(%(queues)s::text[])) AS running;

-- name: queue_stats
-- Per-queue backlog and lease health from partial indexes only (cheap at a million rows), queue filter in every part; shared by `tenure stats`, the exporter and the operator.
WITH pending AS (
    SELECT queue_name,
           count(*) FILTER (WHERE available_at <= now()) AS ready,
           count(*) FILTER (WHERE available_at > now()) AS scheduled,
           coalesce(extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now())), 0) AS oldest_ready_age,
           count(*) FILTER (WHERE attempt_count > 0) AS redelivered
    FROM {schema}.jobs WHERE status = 'pending' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    GROUP BY queue_name
), running AS (
    SELECT j.queue_name,
           count(*) AS running,
           count(*) FILTER (WHERE j.lease_expires_at < now()) AS running_expired,
           coalesce(extract(epoch FROM now() - min(j.started_at)), 0) AS oldest_running_age,
           coalesce(extract(epoch FROM now() - min(j.last_heartbeat_at)), 0) AS lag_max,
           coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM now() - j.last_heartbeat_at)), 0) AS lag_p95,
           count(*) FILTER (WHERE j.attempt_count > 1) AS redelivered,
           count(w.id) AS in_flight
    FROM {schema}.jobs j
    LEFT JOIN {schema}.workers w
           ON w.id = j.locked_by AND w.stopped_at IS NULL
          AND w.last_seen_at > now() - make_interval(secs => 3 * w.heartbeat_seconds)
    WHERE j.status = 'running' AND (%(queue)s::text IS NULL OR j.queue_name = %(queue)s::text)
    GROUP BY j.queue_name
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
), ctl AS (
    SELECT name AS queue_name, paused, max_running FROM {schema}.queues
    WHERE %(queue)s::text IS NULL OR name = %(queue)s::text
), cancelled AS (
    SELECT queue_name, count(*) AS cancelled FROM {schema}.jobs
    WHERE cancelled_at IS NOT NULL AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    GROUP BY queue_name
), queues AS (
    SELECT queue_name FROM pending UNION SELECT queue_name FROM running
    UNION SELECT queue_name FROM failed UNION SELECT queue_name FROM live
    UNION SELECT queue_name FROM reaped UNION SELECT queue_name FROM ctl
    UNION SELECT queue_name FROM cancelled
)
SELECT q.queue_name AS queue,
       coalesce(p.ready, 0)::bigint AS ready, coalesce(p.scheduled, 0)::bigint AS scheduled,
       coalesce(r.running, 0)::bigint AS running, coalesce(r.running_expired, 0)::bigint AS running_expired,
       coalesce(r.in_flight, 0)::bigint AS in_flight,
       coalesce(f.failed, 0)::bigint AS failed,
       coalesce(p.oldest_ready_age, 0)::float8 AS oldest_ready_age_seconds,
       coalesce(r.oldest_running_age, 0)::float8 AS oldest_running_age_seconds,
       coalesce(r.lag_max, 0)::float8 AS heartbeat_lag_max_seconds,
       coalesce(r.lag_p95, 0)::float8 AS heartbeat_lag_p95_seconds,
       coalesce(l.live_workers, 0)::bigint AS live_workers,
       (coalesce(p.redelivered, 0) + coalesce(r.redelivered, 0))::bigint AS redelivered,
       coalesce(rp.reaped, 0)::bigint AS reaped_total,
       coalesce(c.paused, false) AS paused, c.max_running,
       coalesce(cx.cancelled, 0)::bigint AS cancelled
FROM queues q
LEFT JOIN pending p USING (queue_name)
LEFT JOIN running r USING (queue_name)
LEFT JOIN failed f USING (queue_name)
LEFT JOIN live l USING (queue_name)
LEFT JOIN reaped rp USING (queue_name)
LEFT JOIN ctl c USING (queue_name)
LEFT JOIN cancelled cx USING (queue_name)
WHERE %(queue)s::text IS NULL OR q.queue_name = %(queue)s::text
ORDER BY q.queue_name;

-- name: queue_completed_counts
-- Completed jobs per queue: a scan of the completed partial index, so callers read it on a slower cadence than queue_stats.
SELECT queue_name AS queue, count(*)::bigint AS completed
FROM {schema}.all_jobs
WHERE status = 'completed' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY queue_name ORDER BY queue_name;

-- name: job_table_stats_stale
-- Whether the planner's statistics of the jobs table lag far behind it (a bulk enqueue since the last analyze): the claim's plan depends on them.
SELECT coalesce(s.n_mod_since_analyze >= %(min_rows)s
                AND s.n_mod_since_analyze >= %(fraction)s * greatest(c.reltuples, 0), false) AS stale
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = '{schema}.jobs'::regclass;

-- name: job_table_analyze_lock
-- Serialise starting workers' analyses of one schema's jobs table (waiting at most 200 ms, this transaction only), and forget the statistics snapshot read before the wait.
WITH timeout AS MATERIALIZED (SELECT set_config('lock_timeout', '200ms', true))
SELECT pg_advisory_xact_lock(hashtext('tenure-analyze:' || %(schema)s)), pg_stat_clear_snapshot() FROM timeout;

-- name: job_table_analyze
-- Refresh the jobs table's planner statistics, waiting at most 200 ms for a vacuum or analyze already running (after job_table_analyze_lock, in its transaction).
ANALYZE {schema}.jobs;

-- name: worker_register
-- Add this process to the worker registry (R9).
INSERT INTO {schema}.workers (id, host, pid, queues, concurrency, heartbeat_seconds, version, lease_seconds)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(heartbeat_seconds)s, %(version)s,
        %(lease_seconds)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL;

-- name: worker_touch
-- Mark a worker as seen now, with its abandoned handler threads (when it holds no jobs, the heartbeat statement is skipped).
UPDATE {schema}.workers SET last_seen_at = now(), abandoned_threads = %(abandoned)s::int WHERE id = %(id)s;

-- name: worker_stop
-- Mark a worker as cleanly stopped.
UPDATE {schema}.workers SET stopped_at = now(), last_seen_at = now() WHERE id = %(id)s;

-- name: worker_list
-- The registry with each worker's liveness judged by the DB clock.
SELECT id, host, pid, queues, concurrency, heartbeat_seconds, lease_seconds, version, started_at, last_seen_at,
       stopped_at, abandoned_threads,
       extract(epoch FROM now() - last_seen_at)::float8 AS silent_seconds,
       (stopped_at IS NULL AND last_seen_at > now() - make_interval(secs => 3 * heartbeat_seconds)) AS alive
FROM {schema}.workers
WHERE stopped_at IS NULL OR stopped_at > now() - interval '1 day'
ORDER BY started_at;

-- name: worker_prune
-- Forget workers that stopped or went silent long ago (their jobs are recovered by lease expiry, never by this row).
DELETE FROM {schema}.workers
WHERE coalesce(stopped_at, last_seen_at) < now() - make_interval(secs => %(older_than)s);

-- name: execution_claim
-- Atomically claim an idempotency key (R14): insert, or take over only a non-succeeded key whose lease has expired; a key left in flight (or given up in doubt) is taken over in doubt.
WITH claimed AS (
    INSERT INTO {schema}.job_executions AS e (idempotency_key, status, job_id, lock_token, lease_until)
    VALUES (%(key)s, 'processing', %(job_id)s, %(token)s, now() + make_interval(secs => %(lease)s))
    ON CONFLICT (idempotency_key) DO UPDATE
    SET status = 'processing', job_id = excluded.job_id, lock_token = excluded.lock_token,
        lease_until = excluded.lease_until, attempt_count = e.attempt_count + 1,
        claimed_at = now(), updated_at = now(),
        -- The previous holder recorded neither success nor failure: its body may have run.
        last_error_code = CASE WHEN (e.status = 'processing' AND e.lock_token IS DISTINCT FROM excluded.lock_token)
                                    OR e.last_error_code = 'in_doubt' THEN 'in_doubt' END
    WHERE e.status <> 'succeeded'
      AND (e.status IN ('retrying', 'failed') OR e.lease_until IS NULL OR e.lease_until < now()
           OR e.lock_token = excluded.lock_token)
    RETURNING e.attempt_count, e.last_error_code
)
SELECT CASE WHEN last_error_code = 'in_doubt' THEN 'in_doubt' ELSE 'claimed' END AS outcome,
       NULL::text AS result_ref, attempt_count FROM claimed
UNION ALL
SELECT CASE WHEN e.status = 'succeeded' THEN 'already_succeeded' ELSE 'leased_by_other_worker' END,
       e.result_ref, e.attempt_count
FROM {schema}.job_executions e
WHERE e.idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM claimed);

-- name: execution_recheck
-- After a reconnect: the execution-store rows of effects whose success this worker saw acknowledged (a failover may have lost them).
SELECT k.key, k.token, e.status, (e.lock_token = k.token) AS token_current
FROM unnest(%(keys)s::text[], %(tokens)s::uuid[]) AS k(key, token)
LEFT JOIN {schema}.job_executions e ON e.idempotency_key = k.key;

-- name: execution_mark_in_doubt
-- An acknowledged success missing after a failover: the key becomes in doubt (the next claim reconciles, never runs it as new); a key held by another live claim is left alone.
INSERT INTO {schema}.job_executions AS e (idempotency_key, status, job_id, lock_token, lease_until, last_error_code)
VALUES (%(key)s, 'retrying', %(job_id)s, %(token)s, NULL, 'in_doubt')
ON CONFLICT (idempotency_key) DO UPDATE
SET status = 'retrying', lease_until = NULL, last_error_code = 'in_doubt', updated_at = now()
WHERE e.status IN ('retrying', 'failed') OR (e.status = 'processing' AND e.lock_token = %(token)s)
RETURNING idempotency_key;

-- name: execution_succeed
-- Record the effect's result; only the holder of the key's current claim may (CAS on the token).
UPDATE {schema}.job_executions
SET status = 'succeeded', result_ref = %(result_ref)s, lease_until = NULL, succeeded_at = now(),
    updated_at = now(), last_error_code = NULL
WHERE idempotency_key = %(key)s AND status = 'processing' AND lock_token = %(token)s
RETURNING idempotency_key;

-- name: execution_fail
-- Record a failed effect attempt (retrying or failed); only the current holder may.
UPDATE {schema}.job_executions
SET status = %(status)s, last_error_code = %(error_code)s, lease_until = NULL, updated_at = now()
WHERE idempotency_key = %(key)s AND status = 'processing' AND lock_token = %(token)s
RETURNING idempotency_key;

-- name: execution_get
-- One execution record by idempotency key.
SELECT * FROM {schema}.job_executions WHERE idempotency_key = %(key)s;

-- name: dlq_list
-- Dead-lettered jobs, newest first, optionally filtered by queue and error code.
SELECT id, queue_name, task, idempotency_key, payload_version, attempt_count, lease_expiry_count,
       first_failed_at, last_failed_at, failed_at, last_error_code, last_error, correlation_id
FROM {schema}.jobs
WHERE status = 'failed'
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
ORDER BY failed_at DESC, id DESC
LIMIT %(limit)s;

-- name: dlq_select_for_replay
-- The next batch of dead-lettered jobs to replay (by id list or by error code), oldest first, locked.
SELECT id, queue_name, task, payload, payload_version
FROM {schema}.jobs
WHERE status = 'failed'
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
  AND id > %(after_id)s
ORDER BY id
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED;

-- name: dlq_replay
-- Move dead-lettered jobs back to pending with a fresh attempt budget; only jobs still in the DLQ move (idempotent re-runs).
WITH updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now(), attempt_count = 0, lease_expiry_count = 0,
        failed_at = NULL, updated_at = now()
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'failed'
    RETURNING j.id, j.queue_name
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason)
    SELECT id, queue_name, 'replayed_from_dead_letter', %(reason)s FROM updated
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM updated) d
)
SELECT id FROM updated WHERE (SELECT count(*) FROM notified) >= 0;

-- name: dlq_mark_invalid
-- Record that a replay skipped a dead-lettered job because its payload fails validation.
INSERT INTO {schema}.job_events (job_id, queue_name, event, reason)
SELECT id, queue_name, 'replay_skipped_invalid', %(reason)s FROM {schema}.jobs WHERE id = %(id)s;

-- name: dlq_purge
-- Delete dead-lettered jobs that failed more than `older_than` seconds ago (retention policy), freeing their idempotency keys.
WITH deleted AS (
    DELETE FROM {schema}.jobs
    WHERE status = 'failed' AND failed_at < now() - make_interval(secs => %(older_than)s)
      AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    RETURNING id, idempotency_key
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING deleted d WHERE r.job_id = d.id
)
SELECT id FROM deleted;

-- name: job_prune_completed
-- Delete up to `batch` completed jobs older than `older_than` seconds still in `jobs` (completed before 0009, not moved yet), with their audit events and keys.
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'completed' AND completed_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY completed_at LIMIT %(batch)s
), deleted AS (
    DELETE FROM {schema}.jobs j USING doomed d WHERE j.id = d.id RETURNING j.id, j.idempotency_key
), events AS (
    DELETE FROM {schema}.job_events e USING deleted d WHERE e.job_id = d.id
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: job_prune_cancelled
-- Delete up to `batch` cancelled jobs cancelled more than `older_than` seconds ago, with their audit events and keys.
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE cancelled_at IS NOT NULL AND status = 'cancelled'
      AND cancelled_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY cancelled_at LIMIT %(batch)s
), deleted AS (
    DELETE FROM {schema}.jobs j USING doomed d WHERE j.id = d.id RETURNING j.id, j.idempotency_key
), events AS (
    DELETE FROM {schema}.job_events e USING deleted d WHERE e.job_id = d.id
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING deleted d WHERE r.job_id = d.id
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: job_history_ensure
-- Create the day partitions of job_history from `days_back` days before today (UTC, by the DB clock) to `days_ahead` after it that are missing; returns how many it created.
SELECT {schema}.job_history_ensure(%(schema)s::text, (now() AT TIME ZONE 'UTC')::date - %(days_back)s::int,
                                   (now() AT TIME ZONE 'UTC')::date + %(days_ahead)s::int) AS created;

-- name: job_history_move_span
-- The next batch of completed jobs still in `jobs` (completed before 0009) after `after_id`, in id order: its last id and the first and last UTC day of its completions (no row: none left).
SELECT max(id) AS last_id, (min(completed_at) AT TIME ZONE 'UTC')::date AS first_day,
       (max(completed_at) AT TIME ZONE 'UTC')::date AS last_day
FROM (SELECT id, completed_at FROM {schema}.jobs
      WHERE status = 'completed' AND id > %(after_id)s::bigint ORDER BY id LIMIT %(batch)s) b
HAVING count(*) > 0;

-- name: job_history_ensure_days
-- Create the day partitions of job_history from `first_day` to `last_day` (UTC) that are missing; returns how many it created.
SELECT {schema}.job_history_ensure(%(schema)s::text, %(first_day)s::date, %(last_day)s::date) AS created;

-- name: job_history_move_batch
-- Move the completed jobs still in `jobs` with ids in (`after_id`, `last_id`] into job_history, with their keys; returns how many moved.
WITH moved AS (
    DELETE FROM {schema}.jobs j
    WHERE j.status = 'completed' AND j.id > %(after_id)s::bigint AND j.id <= %(last_id)s::bigint
    RETURNING j.*
), keys AS (
    INSERT INTO {schema}.job_keys (idempotency_key, created_at)
    SELECT idempotency_key, created_at FROM moved WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING
), archived AS (
    INSERT INTO {schema}.job_history SELECT * FROM moved RETURNING 1
)
SELECT count(*)::int AS moved FROM archived;

-- name: job_history_drop_oldest
-- Drop the oldest day partition of job_history that ended more than `older_than` seconds ago, with its jobs' events and keys; `jobs` is how many it held (NULL: none that old).
SELECT {schema}.job_history_drop_oldest(%(schema)s::text, now() - make_interval(secs => %(older_than)s)) AS jobs;

-- name: job_history_prune_default
-- Delete up to `batch` jobs of job_history's default partition (completed on a day that had no partition yet) that completed more than `older_than` seconds ago, with their events and keys.
WITH doomed AS (
    SELECT id FROM {schema}.job_history_default
    WHERE completed_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY completed_at LIMIT %(batch)s
), deleted AS (
    DELETE FROM {schema}.job_history_default h USING doomed d WHERE h.id = d.id
    RETURNING h.id, h.idempotency_key
), events AS (
    DELETE FROM {schema}.job_events e USING deleted d WHERE e.job_id = d.id
), keys AS (
    DELETE FROM {schema}.job_keys k USING deleted d WHERE k.idempotency_key = d.idempotency_key
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: job_history_partition_list
-- The day partitions of job_history (and the default one) with their row estimates, oldest first.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bounds, c.reltuples::bigint AS estimated_rows
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = '{schema}.job_history'::regclass
ORDER BY c.relname;

-- name: job_key_release_orphan
-- Forget an idempotency key that no job holds any more (its job deleted outside tenure's statements); returns it when it was forgotten.
DELETE FROM {schema}.job_keys k
WHERE k.idempotency_key = %(key)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs j WHERE j.idempotency_key = %(key)s)
RETURNING k.idempotency_key;

-- name: job_runtime_quantiles
-- Runtime p50/p99 of recent successful attempts per queue and task (from audit events), for `tenure doctor`.
WITH runs AS (
    SELECT c.queue_name, j.task,
           extract(epoch FROM c.created_at - coalesce((c.detail ->> 'started_at')::timestamptz, cl.created_at))
               AS runtime
    FROM {schema}.job_events c
    -- Attempts recorded before the attempt record carried its start: their `claimed` row.
    LEFT JOIN {schema}.job_events cl ON c.detail IS NULL AND cl.job_id = c.job_id
                                    AND cl.lock_token = c.lock_token AND cl.event = 'claimed'
    JOIN {schema}.all_jobs j ON j.id = c.job_id
    WHERE c.event = 'completed' AND c.created_at > now() - make_interval(secs => %(window)s)
      AND (c.detail ? 'started_at' OR cl.id IS NOT NULL)
)
SELECT queue_name, task, count(*)::bigint AS runs,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY runtime)::float8 AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY runtime)::float8 AS p99,
       max(runtime)::float8 AS max
FROM runs GROUP BY queue_name, task ORDER BY queue_name, task;

-- name: queue_listen
-- Subscribe this connection to the schema's wake-up channel (notified on enqueue, release and requeue).
LISTEN {channel};

-- name: db_now
-- The database clock, the only clock leases are judged by.
SELECT now() AS now, extract(epoch FROM now())::float8 AS epoch;

-- name: job_running_list
-- Running jobs, oldest first, with age, heartbeat lag, lease state and owner liveness by the DB clock (for `tenure doctor`).
SELECT j.id, j.queue_name, j.task, j.locked_by, j.attempt_count, j.lease_expires_at,
       extract(epoch FROM now() - j.started_at)::float8 AS age_seconds,
       extract(epoch FROM now() - j.last_heartbeat_at)::float8 AS heartbeat_lag_seconds,
       extract(epoch FROM j.lease_expires_at - now())::float8 AS lease_remaining_seconds,
       CASE WHEN w.id IS NULL THEN 'unknown'
            WHEN w.stopped_at IS NOT NULL THEN 'stopped'
            WHEN w.last_seen_at > now() - make_interval(secs => 3 * w.heartbeat_seconds) THEN 'alive'
            ELSE 'silent' END AS owner_status,
       w.heartbeat_seconds AS owner_heartbeat_seconds, w.version AS owner_version
FROM {schema}.jobs j
LEFT JOIN {schema}.workers w ON w.id = j.locked_by
WHERE j.status = 'running' AND (%(queue)s::text IS NULL OR j.queue_name = %(queue)s::text)
ORDER BY j.started_at, j.id
LIMIT %(limit)s;

-- name: job_reap_review
-- Reaps within a window per queue and task, and how many the reaped token later tried to write (reaper too eager), for `tenure doctor`.
WITH reaps AS (
    SELECT e.job_id, e.queue_name, e.lock_token, e.created_at, e.detail->>'owner_status' AS owner_status
    FROM {schema}.job_events e
    WHERE e.event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter')
      AND e.created_at > now() - make_interval(secs => %(window)s)
      AND (%(queue)s::text IS NULL OR e.queue_name = %(queue)s::text)
), late AS (
    SELECT r.job_id, r.lock_token, r.created_at, min(s.created_at) AS stale_at,
           bool_or(s.event = 'stale_completion_rejected') AS completion
    FROM reaps r
    JOIN {schema}.job_events s
      ON s.job_id = r.job_id AND s.lock_token = r.lock_token AND s.created_at >= r.created_at
     AND s.event IN ('stale_completion_rejected', 'stale_write_rejected', 'heartbeat_lost')
    GROUP BY r.job_id, r.lock_token, r.created_at
)
SELECT r.queue_name, coalesce(j.task, '?') AS task,
       count(*)::bigint AS reaped,
       count(l.job_id)::bigint AS followed_by_stale_write,
       count(*) FILTER (WHERE l.completion)::bigint AS followed_by_stale_completion,
       count(*) FILTER (WHERE r.owner_status = 'alive')::bigint AS owner_alive,
       min(r.created_at) AS first_reaped_at, max(r.created_at) AS last_reaped_at,
       max(extract(epoch FROM l.stale_at - r.created_at))::float8 AS max_stale_after_seconds,
       (array_agg(r.job_id ORDER BY r.created_at) FILTER (WHERE l.job_id IS NOT NULL))[1:5] AS stale_job_ids,
       (array_agg(r.job_id ORDER BY r.created_at))[1:5] AS job_ids
FROM reaps r
LEFT JOIN late l ON l.job_id = r.job_id AND l.lock_token = r.lock_token AND l.created_at = r.created_at
LEFT JOIN {schema}.all_jobs j ON j.id = r.job_id
GROUP BY r.queue_name, coalesce(j.task, '?')
ORDER BY r.queue_name, task;

-- name: migration_lock
-- Serialise concurrent `tenure migrate` runs on one schema (transaction-scoped advisory lock).
SELECT pg_advisory_xact_lock(hashtext('tenure-migrate:' || %(schema)s));

-- name: migration_schema_create
-- Create the schema that holds every tenure object, if missing.
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: migration_search_path
-- Point unqualified names in a migration file at the schema (this transaction only).
SET LOCAL search_path TO {schema};

-- name: migration_table_exists
-- Whether the migrations table exists yet (an empty schema has none).
SELECT to_regclass(%(table)s) IS NOT NULL AS present;

-- name: migration_version
-- The highest applied migration.
SELECT coalesce(max(version), 0) AS version FROM {schema}.schema_migrations;

-- name: migration_record
-- Record one applied migration.
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: job_cancel
-- Cancel jobs by id in one statement: pending ones at once; running ones by revoking their token (CAS on the token read), so the owner's next heartbeat reports the loss and its later writes are rejected. Every cancel is audited with who asked; a running job's cancel ends its attempt, so it is that attempt's record (fence, started_at).
WITH target AS (
    SELECT id, status, lock_token, locked_by, attempt_count, fence, started_at FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('pending', 'running')
    ORDER BY id
    FOR UPDATE
), updated AS (
    UPDATE {schema}.jobs j
    SET status = 'cancelled', cancelled_at = now(), lease_expires_at = NULL, locked_by = NULL,
        lock_token = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND j.status = t.status AND j.lock_token IS NOT DISTINCT FROM t.lock_token
    RETURNING j.id, j.queue_name, t.status AS previous_status, t.lock_token AS revoked_token,
              t.locked_by AS owner, t.attempt_count, t.fence, t.started_at
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, 'cancelled', revoked_token, owner, attempt_count,
           'requested by ' || %(requested_by)s::text,
           jsonb_build_object('requested_by', %(requested_by)s::text, 'previous_status', previous_status::text)
           || CASE WHEN previous_status = 'running'
                   THEN jsonb_build_object('fence', fence, 'started_at', started_at) ELSE '{}'::jsonb END
    FROM updated
)
SELECT id, queue_name, previous_status::text AS previous_status, revoked_token, owner FROM updated;

-- name: job_status_many
-- The status of each of the given job ids (missing ids are absent), to validate a command before it writes.
SELECT id, status::text AS status, queue_name, task, payload, payload_version
FROM {schema}.all_jobs WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id;

-- name: job_retry_many
-- Put failed or cancelled jobs back as pending with a fresh attempt budget (like a DLQ replay); only jobs still in those states move. Audited with who asked.
WITH updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now(), attempt_count = 0, lease_expiry_count = 0,
        failed_at = NULL, cancelled_at = NULL, updated_at = now()
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('failed', 'cancelled')
    RETURNING j.id, j.queue_name
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason, detail)
    SELECT id, queue_name, 'retried_by_request', 'requested by ' || %(requested_by)s::text,
           jsonb_build_object('requested_by', %(requested_by)s::text)
    FROM updated
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM updated) d
)
SELECT id FROM updated WHERE (SELECT count(*) FROM notified) >= 0;

-- name: job_list
-- Jobs newest first (keyset paging on id: pass the last id seen as `before_id`), filtered by queue, status, task, created or failed since.
SELECT id, queue_name, task, status::text AS status, priority, attempt_count, max_attempts,
       available_at, created_at, started_at, completed_at, failed_at, cancelled_at, locked_by,
       last_error_code, idempotency_key
FROM {schema}.all_jobs
WHERE (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
  AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
  -- One literal per status (as in job_browse_filter): the one asked for folds into a constant,
  -- which also lets the planner leave job_history out (its CHECK) for any status but completed.
  AND (%(status)s::text IS NULL
       OR (%(status)s::text = 'pending' AND status = 'pending'::{schema}.job_status)
       OR (%(status)s::text = 'running' AND status = 'running'::{schema}.job_status)
       OR (%(status)s::text = 'completed' AND status = 'completed'::{schema}.job_status)
       OR (%(status)s::text = 'failed' AND status = 'failed'::{schema}.job_status)
       OR (%(status)s::text = 'cancelled' AND status = 'cancelled'::{schema}.job_status))
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(created_since)s::float8 IS NULL OR created_at >= now() - make_interval(secs => %(created_since)s::float8))
  AND (%(failed_since)s::float8 IS NULL OR last_failed_at >= now() - make_interval(secs => %(failed_since)s::float8))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: queue_control_set
-- Pause, resume or limit a queue (creating its control row); returns the row before and after, so a caller can report a no-op.
WITH before AS (
    SELECT paused, max_running FROM {schema}.queues WHERE name = %(name)s
), upsert AS (
    INSERT INTO {schema}.queues AS q (name, paused, max_running, paused_at, updated_by)
    VALUES (%(name)s, coalesce(%(paused)s::boolean, false),
            CASE WHEN %(set_limit)s::boolean THEN %(max_running)s::int END,
            CASE WHEN %(paused)s::boolean THEN now() END, %(requested_by)s)
    ON CONFLICT (name) DO UPDATE
    SET paused = coalesce(%(paused)s::boolean, q.paused),
        max_running = CASE WHEN %(set_limit)s::boolean THEN %(max_running)s::int ELSE q.max_running END,
        paused_at = CASE WHEN %(paused)s::boolean IS NULL THEN q.paused_at
                         WHEN %(paused)s::boolean AND q.paused THEN q.paused_at
                         WHEN %(paused)s::boolean THEN now() END,
        updated_by = %(requested_by)s, updated_at = now()
    RETURNING q.name, q.paused, q.max_running, q.paused_at
), notified AS (
    -- Resuming (or raising a limit) wakes the queue's workers at once.
    SELECT pg_notify(%(channel)s, name) FROM upsert WHERE NOT paused
)
SELECT u.name, u.paused, u.max_running, u.paused_at,
       coalesce(b.paused, false) AS was_paused, b.max_running AS old_max_running
FROM upsert u LEFT JOIN before b ON true
WHERE (SELECT count(*) FROM notified) >= 0;

-- name: queue_control_list
-- Every queue that has jobs, live workers or a control row, with its pause state, limit and counts (partial indexes only).
WITH known AS (
    SELECT name FROM {schema}.queues
    UNION SELECT DISTINCT queue_name FROM {schema}.jobs WHERE status IN ('pending', 'running')
    UNION SELECT DISTINCT q FROM {schema}.workers, unnest(queues) AS q
          WHERE stopped_at IS NULL AND last_seen_at > now() - make_interval(secs => 3 * heartbeat_seconds)
)
SELECT k.name AS queue, coalesce(s.paused, false) AS paused, s.max_running, s.paused_at, s.updated_by,
       (SELECT count(*) FROM {schema}.jobs j WHERE j.status = 'pending' AND j.queue_name = k.name
          AND j.available_at <= now())::bigint AS ready,
       (SELECT count(*) FROM {schema}.jobs j WHERE j.status = 'running' AND j.queue_name = k.name)::bigint AS running
FROM known k LEFT JOIN {schema}.queues s ON s.name = k.name
ORDER BY k.name;

-- name: queue_control_get
-- The control rows of the given queues (paused, max_running); absent queues have none.
SELECT name, paused, max_running FROM {schema}.queues
WHERE %(queues)s::text[] IS NULL OR name = ANY(%(queues)s::text[]);

-- name: periodic_schedule_get
-- The last enqueued slot of each named schedule, with the DB clock.
SELECT name, last_slot, cron, timezone, enqueued_total, skipped_total, now() AS db_now
FROM {schema}.periodic_schedules WHERE name = ANY(%(names)s::text[]);

-- name: periodic_schedule_init
-- Register a schedule at its current slot without enqueueing it (a new schedule starts with the next slot); no-op if it exists.
INSERT INTO {schema}.periodic_schedules (name, task, queue_name, cron, timezone, last_slot)
VALUES (%(name)s, %(task)s, %(queue)s, %(cron)s, %(timezone)s, %(slot)s)
ON CONFLICT (name) DO NOTHING;

-- name: periodic_enqueue_slot
-- Advance one schedule to `slot` and enqueue its job in one statement; the row's CAS (last_slot < slot) and the job's idempotency key per (schedule, slot) make each slot enqueue exactly once however many schedulers race.
WITH advanced AS (
    UPDATE {schema}.periodic_schedules s
    SET last_slot = %(slot)s, cron = %(cron)s, timezone = %(timezone)s, task = %(task)s,
        queue_name = %(queue)s, enqueued_total = s.enqueued_total + 1,
        skipped_total = s.skipped_total + %(skipped)s, updated_at = now()
    WHERE s.name = %(name)s AND s.last_slot < %(slot)s
    RETURNING s.name
), key AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT %(idempotency_key)s::text FROM advanced
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, idempotency_key, priority)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(max_attempts)s, %(idempotency_key)s, %(priority)s
    FROM key
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM ins
)
SELECT id FROM ins WHERE (SELECT count(*) FROM notified) >= 0;

-- name: sqs_secret_ensure
-- The receipt handles' HMAC key: stored once (the first `tenure sqs` to start wins), then read by every replica.
WITH ins AS (
    INSERT INTO {schema}.sqs_secrets (hmac_key) VALUES (%(key)s) ON CONFLICT (id) DO NOTHING RETURNING hmac_key
)
SELECT hmac_key FROM ins UNION ALL SELECT hmac_key FROM {schema}.sqs_secrets WHERE NOT EXISTS (SELECT 1 FROM ins);

-- name: sqs_queue_create
-- Create an SQS queue, or return the existing one of that name (`created` false) for the caller to compare.
WITH ins AS (
    INSERT INTO {schema}.sqs_queues (name, fifo, attributes, tags)
    VALUES (%(name)s, %(fifo)s, %(attributes)s::jsonb, %(tags)s::jsonb)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, fifo, attributes, tags, true AS created
)
SELECT * FROM ins
UNION ALL
SELECT name, fifo, attributes, tags, false AS created FROM {schema}.sqs_queues
WHERE name = %(name)s AND NOT EXISTS (SELECT 1 FROM ins);

-- name: sqs_queue_get
-- One SQS queue with its attributes, tags and timestamps (epoch seconds).
SELECT name, fifo, attributes, tags,
       extract(epoch FROM created_at)::bigint AS created_epoch,
       extract(epoch FROM modified_at)::bigint AS modified_epoch,
       extract(epoch FROM now() - purged_at)::float8 AS purged_seconds_ago
FROM {schema}.sqs_queues WHERE name = %(name)s;

-- name: sqs_queue_list
-- SQS queue names with a prefix, in name order, after a paging cursor (`after`, exclusive).
SELECT name FROM {schema}.sqs_queues
WHERE starts_with(name, %(prefix)s) AND name > %(after)s
ORDER BY name
LIMIT %(limit)s;

-- name: sqs_queue_delete
-- Delete an SQS queue and its waiting and in-flight messages (jobs); returns the queue's name when it existed.
WITH gone AS (
    DELETE FROM {schema}.sqs_queues WHERE name = %(name)s RETURNING name
), messages AS (
    DELETE FROM {schema}.jobs
    WHERE queue_name = %(name)s AND status IN ('pending', 'running') AND EXISTS (SELECT 1 FROM gone)
    RETURNING id
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING messages m WHERE r.job_id = m.id
), dedup AS (
    DELETE FROM {schema}.sqs_dedup WHERE queue_name = %(name)s AND EXISTS (SELECT 1 FROM gone)
)
SELECT name FROM gone;

-- name: sqs_queue_purge
-- Delete every waiting and in-flight message (job) of a queue, audited as one `purged` event per job.
WITH gone AS (
    DELETE FROM {schema}.jobs WHERE queue_name = %(name)s AND status IN ('pending', 'running')
    RETURNING id, queue_name, lock_token, attempt_count
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason)
    SELECT id, queue_name, 'purged', lock_token, %(worker_id)s, attempt_count, 'PurgeQueue' FROM gone
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING gone g WHERE r.job_id = g.id
), stamp AS (
    UPDATE {schema}.sqs_queues SET purged_at = now() WHERE name = %(name)s
)
SELECT count(*)::int AS purged FROM gone;

-- name: sqs_queue_set_attributes
-- Merge attributes into an SQS queue (SQS names, string values) and stamp its modification time.
UPDATE {schema}.sqs_queues
SET attributes = attributes || %(attributes)s::jsonb, modified_at = now()
WHERE name = %(name)s
RETURNING name;

-- name: sqs_queue_tag
-- Add or replace tags of an SQS queue.
UPDATE {schema}.sqs_queues SET tags = tags || %(tags)s::jsonb WHERE name = %(name)s RETURNING tags;

-- name: sqs_queue_untag
-- Remove tags (by key) from an SQS queue.
UPDATE {schema}.sqs_queues SET tags = tags - %(keys)s::text[] WHERE name = %(name)s RETURNING tags;

-- name: sqs_queue_counts
-- The Approximate* counts of an SQS queue: visible (an SQS claim whose visibility timeout ran out included), in flight (running) and delayed messages.
SELECT count(*) FILTER (WHERE status = 'pending' AND available_at <= now()
                           OR status = 'running' AND locked_by = %(worker_id)s AND lease_expires_at <= now())::bigint
           AS visible,
       count(*) FILTER (WHERE status = 'running' AND NOT (locked_by = %(worker_id)s AND lease_expires_at <= now()))::bigint
           AS in_flight,
       count(*) FILTER (WHERE status = 'pending' AND available_at > now())::bigint AS delayed
FROM {schema}.jobs WHERE queue_name = %(name)s AND status IN ('pending', 'running');

-- name: sqs_queue_dead_letter_sources
-- The SQS queues whose RedrivePolicy names a given dead-letter queue (by ARN), in name order.
SELECT name FROM {schema}.sqs_queues
WHERE attributes ? 'RedrivePolicy'
  AND (attributes->>'RedrivePolicy')::jsonb->>'deadLetterTargetArn' = %(arn)s
ORDER BY name;

-- name: sqs_message_send
-- Insert SQS messages as jobs of one queue (one array element per message) and wake that queue's long polls.
WITH input AS (
    SELECT * FROM unnest(%(payloads)s::text[]::jsonb[], %(delays)s::float8[]) WITH ORDINALITY AS t(payload, delay, ord)
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, available_at)
    SELECT %(queue)s, %(task)s, payload, %(max_attempts)s, now() + make_interval(secs => delay)
    FROM input ORDER BY ord
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT id FROM ins WHERE (SELECT count(*) FROM notified) >= 0 ORDER BY id;

-- name: sqs_fifo_lock
-- Serialise the sends or the receives of one FIFO queue until the end of the transaction (deduplication, group order).
SELECT pg_advisory_xact_lock(hashtextextended('tenure.sqs:' || %(lane)s || ':' || %(queue)s, 0));

-- name: sqs_dedup_lookup
-- The jobs that FIFO deduplication ids of a queue name within the 5-minute window.
SELECT dedup_id, job_id FROM {schema}.sqs_dedup
WHERE queue_name = %(queue)s AND dedup_id = ANY(%(dedup_ids)s::text[])
  AND created_at > now() - make_interval(secs => %(window)s);

-- name: sqs_dedup_record
-- Remember FIFO deduplication ids of a queue with their jobs (replacing ids whose window has passed).
INSERT INTO {schema}.sqs_dedup (queue_name, dedup_id, job_id)
SELECT %(queue)s, d, j FROM unnest(%(dedup_ids)s::text[], %(job_ids)s::bigint[]) AS t(d, j)
ON CONFLICT (queue_name, dedup_id) DO UPDATE SET job_id = excluded.job_id, created_at = now();

-- name: sqs_message_expire
-- Make the messages of a queue whose visibility timeout (lease) ran out visible again at once, each a CAS on its token; those received `max_receive` times or more move to the dead-letter queue `dlq` instead (redrive).
WITH expired AS (
    SELECT id, lock_token FROM {schema}.jobs
    WHERE queue_name = %(queue)s AND status = 'running' AND locked_by = %(worker_id)s AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
), updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now(),
        queue_name = CASE WHEN %(dlq)s::text IS NOT NULL AND j.attempt_count >= %(max_receive)s::int
                          THEN %(dlq)s::text ELSE j.queue_name END,
        attempt_count = CASE WHEN %(dlq)s::text IS NOT NULL AND j.attempt_count >= %(max_receive)s::int
                             THEN 0 ELSE j.attempt_count END,
        lease_expiry_count = j.lease_expiry_count + 1,
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    FROM expired e
    WHERE j.id = e.id AND j.lock_token = e.lock_token
    RETURNING j.id, j.queue_name, e.lock_token, j.fence, j.started_at,
              j.queue_name IS DISTINCT FROM %(queue)s AS redriven
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, reason, detail)
    SELECT id, %(queue)s, CASE WHEN redriven THEN 'dead_lettered' ELSE 'visibility_expired' END, lock_token,
           %(worker_id)s, CASE WHEN redriven THEN 'maxReceiveCount' ELSE 'visibility_timeout' END,
           jsonb_build_object('fence', fence, 'started_at', started_at, 'moved_to', CASE WHEN redriven THEN queue_name END)
    FROM updated
)
SELECT count(*)::int AS expired, count(*) FILTER (WHERE redriven)::int AS redriven FROM updated;

-- name: sqs_fifo_claim
-- Claim up to `limit` messages of a FIFO queue in id order from message groups with nothing in flight (run under sqs_fifo_lock); same columns as job_claim.
WITH inflight AS (
    SELECT DISTINCT payload->>'group' AS g FROM {schema}.jobs
    WHERE queue_name = %(queue)s AND status = 'running'
), picked AS (
    SELECT j.id FROM {schema}.jobs j
    WHERE j.queue_name = %(queue)s AND j.status = 'pending' AND j.available_at <= now()
      AND NOT EXISTS (SELECT 1 FROM inflight f WHERE f.g = j.payload->>'group')
      -- a group's messages leave in order: none while an earlier one of its group waits delayed
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs e
                      WHERE e.queue_name = %(queue)s AND e.status = 'pending' AND e.id < j.id
                        AND e.available_at > now() AND e.payload->>'group' = j.payload->>'group')
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE OF j
), claimed AS (
    UPDATE {schema}.jobs j
    SET status = 'running', started_at = now(), last_heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease)s),
        locked_by = %(worker_id)s, lock_token = gen_random_uuid(),
        fence = nextval('{schema}.job_fence_seq'),
        attempt_count = j.attempt_count + 1, updated_at = now()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.queue_name, j.task, j.payload, j.payload_version, j.attempt_count, j.max_attempts,
              j.lock_token, j.fence, j.idempotency_key, j.correlation_id, j.checkpoint_step, j.checkpoint_data,
              j.lease_expires_at, greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds,
              j.priority, j.trace_context
)
SELECT * FROM claimed ORDER BY id;

-- name: sqs_message_first_receive
-- Record the first receive of claimed messages (kept on later receives); returns each one's first receive and send (created) times in epoch ms.
WITH ins AS (
    INSERT INTO {schema}.sqs_receipts (job_id)
    SELECT unnest(%(ids)s::bigint[]) ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, first_received_at
), firsts AS (
    SELECT job_id, first_received_at FROM ins
    UNION ALL
    SELECT job_id, first_received_at FROM {schema}.sqs_receipts
    WHERE job_id = ANY(%(ids)s::bigint[]) AND job_id NOT IN (SELECT job_id FROM ins)
)
SELECT f.job_id, (extract(epoch FROM f.first_received_at) * 1000)::bigint AS first_ms,
       (extract(epoch FROM j.created_at) * 1000)::bigint AS sent_ms
FROM firsts f JOIN {schema}.jobs j ON j.id = f.job_id;

-- name: sqs_message_first_receive_claimed
-- Record the first receive of the messages of a queue that this transaction claimed (started_at is now(), the transaction's start), sent after the claim in the same pipeline; returns each one's first receive and send times in epoch ms.
-- A row another transaction claimed at the very same microsecond may be included (its first receive,
-- if new, is then recorded at its own start time); the caller keeps only the ids it claimed.
WITH claimed AS (
    SELECT id, created_at FROM {schema}.jobs
    WHERE queue_name = %(queue)s AND status = 'running' AND started_at = now() AND locked_by = %(worker_id)s
), ins AS (
    INSERT INTO {schema}.sqs_receipts (job_id)
    SELECT id FROM claimed ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, first_received_at
)
SELECT c.id AS job_id,
       (extract(epoch FROM coalesce(i.first_received_at, r.first_received_at, now())) * 1000)::bigint AS first_ms,
       (extract(epoch FROM c.created_at) * 1000)::bigint AS sent_ms
FROM claimed c
LEFT JOIN ins i ON i.job_id = c.id
LEFT JOIN {schema}.sqs_receipts r ON r.job_id = c.id;

-- name: sqs_message_visibility
-- Change the visibility timeout (the lease) of received messages, each a CAS on its token, capped at `cap` seconds after the first receive; 0 makes a message visible at once. Outcome per message: changed, capped or stale.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(timeouts)s::float8[]) WITH ORDINALITY
        AS t(id, token, timeout, ord)
), current AS (
    SELECT i.ord, j.id, i.token, i.timeout,
           coalesce((SELECT r.first_received_at FROM {schema}.sqs_receipts r WHERE r.job_id = j.id), j.started_at)
               + make_interval(secs => %(cap)s) >= now() + make_interval(secs => i.timeout) AS in_cap
    FROM input i JOIN {schema}.jobs j
      ON j.id = i.id AND j.status = 'running' AND j.locked_by = %(worker_id)s AND j.lock_token = i.token
), updated AS (
    UPDATE {schema}.jobs j
    SET status = CASE WHEN c.timeout <= 0 THEN 'pending'::{schema}.job_status ELSE j.status END,
        available_at = CASE WHEN c.timeout <= 0 THEN now() ELSE j.available_at END,
        lease_expires_at = CASE WHEN c.timeout <= 0 THEN NULL ELSE now() + make_interval(secs => c.timeout) END,
        locked_by = CASE WHEN c.timeout <= 0 THEN NULL ELSE j.locked_by END,
        lock_token = CASE WHEN c.timeout <= 0 THEN NULL ELSE j.lock_token END,
        updated_at = now()
    FROM current c
    WHERE j.id = c.id AND c.in_cap AND j.lock_token = c.token
    RETURNING c.ord, j.id, j.queue_name, c.token, c.timeout, j.fence, j.started_at, j.attempt_count
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, 'visibility_released', token, %(worker_id)s, attempt_count, 'ChangeMessageVisibility',
           jsonb_build_object('fence', fence, 'started_at', started_at)
    FROM updated WHERE timeout <= 0
), notified AS (
    SELECT pg_notify(%(channel)s, queue_name) FROM (SELECT DISTINCT queue_name FROM updated WHERE timeout <= 0) d
)
SELECT i.ord, i.id,
       CASE WHEN u.id IS NOT NULL THEN 'changed' WHEN c.id IS NOT NULL THEN 'capped' ELSE 'stale' END AS outcome
FROM input i LEFT JOIN current c ON c.ord = i.ord LEFT JOIN updated u ON u.ord = i.ord
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY i.ord;

-- name: sqs_message_move
-- Move up to `limit` visible messages (pending jobs, oldest first) of one queue to another, audited, and wake the destination (message move task, DLQ redrive back).
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE queue_name = %(source)s AND status = 'pending' AND available_at <= now()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE {schema}.jobs j
    SET queue_name = %(target)s, attempt_count = 0, available_at = now(), updated_at = now()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason, detail)
    SELECT id, %(target)s, 'replayed_from_dead_letter', 'StartMessageMoveTask',
           jsonb_build_object('from', %(source)s::text) FROM moved
), notified AS (
    SELECT pg_notify(%(channel)s, %(target)s) WHERE EXISTS (SELECT 1 FROM moved)
)
SELECT count(*)::int AS moved FROM moved WHERE (SELECT count(*) FROM notified) >= 0;

-- name: job_browse_filter
-- The job browser's filter, a fragment spliced into the job_browse queries where they say {job_browse_filter}; every condition is off when its parameter is NULL.
    (%(id)s::bigint IS NULL OR j.id = %(id)s::bigint)
    AND (%(queue)s::text IS NULL OR j.queue_name = %(queue)s::text)
    -- One literal per status: a text parameter cast to the enum is not folded into a constant at
    -- plan time, so `status = $1::text::job_status` matches no partial index (a page of running
    -- jobs walked the whole primary key); the literals fold away but the one asked for.
    AND (%(status)s::text IS NULL
         OR (%(status)s::text = 'pending' AND j.status = 'pending'::{schema}.job_status)
         OR (%(status)s::text = 'running' AND j.status = 'running'::{schema}.job_status)
         OR (%(status)s::text = 'completed' AND j.status = 'completed'::{schema}.job_status)
         OR (%(status)s::text = 'failed' AND j.status = 'failed'::{schema}.job_status)
         OR (%(status)s::text = 'cancelled' AND j.status = 'cancelled'::{schema}.job_status))
    AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
    AND (%(priority_min)s::int IS NULL OR j.priority >= %(priority_min)s::int)
    AND (%(priority_max)s::int IS NULL OR j.priority <= %(priority_max)s::int)
    AND (%(created_after)s::timestamptz IS NULL OR j.created_at >= %(created_after)s::timestamptz)
    AND (%(created_within)s::float8 IS NULL OR j.created_at >= now() - make_interval(secs => %(created_within)s::float8))
    -- Finished: completed_at is set only on completed jobs, failed_at only while failed,
    -- cancelled_at only while cancelled, so this is coalesce(...) >= t, written so each part is
    -- a range scan of its status's partial index (jobs_completed_idx, jobs_failed_idx,
    -- jobs_cancelled_idx) when few jobs match, instead of a walk of the primary key.
    AND (%(finished_after)s::timestamptz IS NULL
         OR (j.status = 'completed' AND j.completed_at >= %(finished_after)s::timestamptz)
         OR (j.status = 'failed' AND j.failed_at >= %(finished_after)s::timestamptz)
         OR j.cancelled_at >= %(finished_after)s::timestamptz)
    AND (%(finished_within)s::float8 IS NULL
         OR (j.status = 'completed' AND j.completed_at >= now() - make_interval(secs => %(finished_within)s::float8))
         OR (j.status = 'failed' AND j.failed_at >= now() - make_interval(secs => %(finished_within)s::float8))
         OR j.cancelled_at >= now() - make_interval(secs => %(finished_within)s::float8))
    AND (%(idempotency_key)s::text IS NULL OR j.idempotency_key = %(idempotency_key)s::text)
    -- Containment as two arms: the payload index leaves running rows out (0010), so a BitmapOr
    -- reads the other rows through it and the running ones (few) through their own index.
    AND (%(payload)s::jsonb IS NULL
         OR (j.status <> 'running' AND j.payload @> %(payload)s::jsonb)
         OR (j.status = 'running' AND j.payload @> %(payload)s::jsonb))

-- name: job_browse
-- One page of the job browser, newest first (keyset on id: pass the last id seen as before_id), filtered by job_browse_filter.
SELECT j.id, j.queue_name, j.task, j.status::text AS status, j.priority, j.attempt_count, j.max_attempts,
       j.lease_expiry_count, j.fence, j.available_at, j.created_at, j.started_at, j.completed_at, j.failed_at,
       j.cancelled_at, coalesce(j.completed_at, j.failed_at, j.cancelled_at) AS finished_at, j.locked_by,
       j.lease_expires_at, j.last_error_code, j.idempotency_key, j.payload
FROM {schema}.all_jobs j
WHERE (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
  AND {job_browse_filter}
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: job_browse_ids
-- The ids of the jobs matching job_browse_filter in a given status set, oldest first after after_id: the batches of a bulk action (one page of ids per call).
SELECT j.id FROM {schema}.all_jobs j
WHERE j.id > %(after_id)s::bigint
  AND (('pending' = ANY(%(statuses)s::text[]) AND j.status = 'pending'::{schema}.job_status)
       OR ('running' = ANY(%(statuses)s::text[]) AND j.status = 'running'::{schema}.job_status)
       OR ('completed' = ANY(%(statuses)s::text[]) AND j.status = 'completed'::{schema}.job_status)
       OR ('failed' = ANY(%(statuses)s::text[]) AND j.status = 'failed'::{schema}.job_status)
       OR ('cancelled' = ANY(%(statuses)s::text[]) AND j.status = 'cancelled'::{schema}.job_status))
  AND {job_browse_filter}
ORDER BY j.id
LIMIT %(limit)s;

-- name: job_browse_count
-- How many jobs match job_browse_filter, counting at most `cap` of them (the caller labels a capped count an estimate).
SELECT count(*)::bigint AS n FROM (
    SELECT 1 FROM {schema}.all_jobs j WHERE {job_browse_filter} LIMIT %(cap)s
) matched;

-- name: job_browse_estimate
-- The planner's estimate of how many jobs match job_browse_filter, from EXPLAIN without running the query.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {schema}.all_jobs j WHERE {job_browse_filter};

-- name: queue_throughput_hour
-- Per queue, jobs completed and dead-lettered, and attempts that failed, within the last hour (range scans of the status indexes and the events' BRIN index).
WITH done AS (
    SELECT queue_name, count(*)::bigint AS completed FROM {schema}.all_jobs
    WHERE status = 'completed' AND completed_at > now() - interval '1 hour' GROUP BY queue_name
), dead AS (
    SELECT queue_name, count(*)::bigint AS dead_lettered FROM {schema}.jobs
    WHERE status = 'failed' AND failed_at > now() - interval '1 hour' GROUP BY queue_name
), failed AS (
    SELECT queue_name, count(*)::bigint AS failed_attempts FROM {schema}.job_events
    WHERE created_at > now() - interval '1 hour'
      AND event IN ('retry_scheduled', 'dead_lettered', 'reaped_due_to_expired_lease', 'reaped_to_dead_letter')
    GROUP BY queue_name
), oldest AS (
    SELECT queue_name, extract(epoch FROM now() - min(available_at))::float8 AS oldest_ready_age_seconds
    FROM {schema}.jobs WHERE status = 'pending' AND available_at <= now() GROUP BY queue_name
)
SELECT q AS queue, coalesce(d.completed, 0) AS completed, coalesce(x.dead_lettered, 0) AS dead_lettered,
       coalesce(f.failed_attempts, 0) AS failed_attempts, coalesce(o.oldest_ready_age_seconds, 0) AS oldest_ready_age_seconds
FROM (SELECT queue_name AS q FROM done UNION SELECT queue_name FROM dead UNION SELECT queue_name FROM failed
      UNION SELECT queue_name FROM oldest) names
LEFT JOIN done d ON d.queue_name = q LEFT JOIN dead x ON x.queue_name = q
LEFT JOIN failed f ON f.queue_name = q LEFT JOIN oldest o ON o.queue_name = q
ORDER BY q;

-- name: periodic_schedule_list
-- Every periodic schedule with its last slot and counters, and the DB clock.
SELECT name, task, queue_name, cron, timezone, last_slot, enqueued_total, skipped_total, updated_at, now() AS db_now
FROM {schema}.periodic_schedules ORDER BY name;

-- name: job_events_since
-- Job events after an event id, oldest first (the job browser's change feed; the primary key bounds the walk).
SELECT id, job_id, queue_name, event, created_at FROM {schema}.job_events
WHERE id > %(after_id)s::bigint ORDER BY id LIMIT %(limit)s;

-- name: job_events_last_id
-- The newest job event id (0 when there are none): where a change feed starts.
SELECT coalesce(max(id), 0)::bigint AS id FROM {schema}.job_events;

-- name: job_newest_id
-- The newest job id (0 when there are none): new jobs are the ones above it.
SELECT coalesce(max(id), 0)::bigint AS id FROM {schema}.all_jobs;

-- name: db_statement_timeout_set
-- Bound the statements of the current transaction (a count that may not run long); the value is a duration such as 250ms.
SELECT set_config('statement_timeout', %(value)s::text, true);

-- name: execution_list_for_job
-- The execution-store records (effects) written by one job's attempts, oldest first.
SELECT idempotency_key, status, lock_token, attempt_count, lease_until, claimed_at, result_ref, last_error_code,
       created_at, updated_at, succeeded_at
FROM {schema}.job_executions WHERE job_id = %(id)s ORDER BY created_at, idempotency_key;

-- name: job_table_dead_rows
-- The jobs table's dead and live row counts (cumulative statistics, at most a second behind) and whether this role may vacuum it (its owner, a member of the owner's role, or a superuser).
SELECT coalesce(s.n_dead_tup, 0)::bigint AS dead, coalesce(s.n_live_tup, 0)::bigint AS live,
       pg_has_role(c.relowner, 'USAGE') AS may_vacuum
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = '{schema}.jobs'::regclass;

-- name: job_table_vacuum_lock
-- Take the one-vacuumer-per-schema session lock without waiting; `taken` says whether it was.
SELECT pg_try_advisory_lock(hashtext('tenure-vacuum:' || %(schema)s)) AS taken;

-- name: job_table_vacuum_unlock
-- Release the session lock job_table_vacuum_lock took.
SELECT pg_advisory_unlock(hashtext('tenure-vacuum:' || %(schema)s)) AS released;

-- name: job_table_vacuum
-- Vacuum the hot table now, dead index entries included, never waiting for a lock (another vacuum of it: skipped) and never truncating (its brief exclusive lock would queue the claims); autocommit only.
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) {schema}.jobs;
