-- name: complete_before_issue13
-- Complete a batch of jobs, each a CAS on (id, running, worker, token); stale attempts are rejected and recorded.
WITH done AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
), updated AS (
    UPDATE {schema}.jobs j
    SET status = 'completed', completed_at = now(), last_heartbeat_at = now(),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    FROM done
    WHERE j.id = done.id AND j.status = 'running' AND j.locked_by = %(worker_id)s
      AND j.lock_token = done.token
    RETURNING j.id, j.queue_name, j.attempt_count, done.token
), accepted AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt)
    SELECT id, queue_name, 'completed', token, %(worker_id)s, attempt_count FROM updated
), rejected AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, reason)
    SELECT d.id, coalesce(j.queue_name, ''), 'stale_completion_rejected', d.token, %(worker_id)s,
           'token no longer current'
    FROM done d LEFT JOIN {schema}.jobs j ON j.id = d.id
    WHERE NOT EXISTS (SELECT 1 FROM updated u WHERE u.id = d.id)
)
SELECT d.id, (u.id IS NOT NULL) AS accepted
FROM done d LEFT JOIN updated u ON u.id = d.id;

-- name: claim_before_issue13
-- Claim up to `limit` ready jobs atomically (SKIP LOCKED): fresh token and fence per job, lease from the DB clock (R1).
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND queue_name = ANY(%(queues)s::text[]) AND available_at <= now()
    ORDER BY queue_name, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
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
              extract(epoch FROM now() - j.available_at)::float8 AS wait_seconds
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt)
    SELECT id, queue_name, 'claimed', lock_token, %(worker_id)s, attempt_count FROM claimed
)
SELECT * FROM claimed;

