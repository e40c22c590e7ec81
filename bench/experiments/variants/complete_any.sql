-- name: job_complete_many_any
-- variant: pkey lookups via = ANY
WITH done AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
), updated AS (
    UPDATE {schema}.jobs j
    SET status = 'completed', completed_at = now(), last_heartbeat_at = now(),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    FROM done
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = done.id AND j.status = 'running' AND j.locked_by = %(worker_id)s
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
