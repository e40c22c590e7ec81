-- name: claim_no_audit
-- variant: claim without the claimed audit row
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
)
SELECT * FROM claimed;

-- name: claim_no_uuid
-- variant: claim with a token derived from the fence (measurement only)
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
        locked_by = %(worker_id)s, lock_token = '00000000-0000-0000-0000-000000000000'::uuid,
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

-- name: complete_no_audit
-- variant: completion without the completed audit row
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
)
SELECT d.id, (u.id IS NOT NULL) AS accepted
FROM done d LEFT JOIN updated u ON u.id = d.id;
