-- name: setup_archive
-- archive table for the move-out variant
CREATE TABLE {schema}.jobs_archive (LIKE {schema}.jobs INCLUDING DEFAULTS);

-- name: complete_archive
-- variant: completion moves the row out of the hot table in the same statement (delete + insert archive + audit)
WITH done AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
), moved AS (
    DELETE FROM {schema}.jobs j USING done
    WHERE j.id = done.id AND j.status = 'running' AND j.locked_by = %(worker_id)s AND j.lock_token = done.token
    RETURNING j.*, done.token AS done_token
), archived AS (
    INSERT INTO {schema}.jobs_archive
    SELECT id, queue_name, task, payload, payload_version, 'completed', attempt_count, max_attempts,
           lease_expiry_count, fence, available_at, started_at, now(), failed_at, first_failed_at, last_failed_at,
           now(), NULL, NULL, NULL, idempotency_key, correlation_id, last_error, last_error_code,
           checkpoint_step, checkpoint_data, checkpoint_at, created_at, now()
    FROM moved
), accepted AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, detail)
    SELECT id, queue_name, 'completed', done_token, %(worker_id)s, attempt_count,
           jsonb_build_object('fence', fence, 'started_at', started_at)
    FROM moved
)
SELECT d.id, (m.id IS NOT NULL) AS accepted
FROM done d LEFT JOIN moved m ON m.id = d.id;

-- name: claim_fence_token
-- variant: the token is not random but derived from the fence (what a fence-only CAS would cost)
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
        locked_by = %(worker_id)s, lock_token = lpad(to_hex(f.v), 32, '0')::uuid,
        fence = f.v,
        attempt_count = j.attempt_count + 1, updated_at = now()
    FROM picked, LATERAL (SELECT nextval('{schema}.job_fence_seq') AS v) f WHERE j.id = picked.id
    RETURNING j.id, j.queue_name, j.task, j.payload, j.payload_version, j.attempt_count,
              j.max_attempts, j.lock_token, j.fence, j.idempotency_key, j.correlation_id,
              j.checkpoint_step, j.checkpoint_data, j.lease_expires_at,
              greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds
)
SELECT * FROM claimed;
