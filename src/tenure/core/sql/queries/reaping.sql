-- The reaper (R7): expired candidates, the CAS that requeues or dead-letters them, the
-- cycle counter and the reap counts.
-- Run by src/tenure/core/repository/reaping.py (ReaperQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

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
