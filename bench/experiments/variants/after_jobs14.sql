-- Variants for `python -m bench.experiments.statement_cpu bench/experiments/variants/after_jobs14.sql`: the claim and
-- completion statements as merged with issue 14 (4f70a0d), before the issue-13 follow-up: the
-- claim with window-function lanes (run here without its gate statement) and the completion
-- that joins the batch's unnest (a nested loop over the batch per row under a generic plan); and the
-- claim before issue 14 (93c1e68^1: no pause, limit, priority or aging), for the cost of job control.

-- name: jobs14_claim
-- Claim up to `limit` ready jobs atomically (SKIP LOCKED): paused queues skipped, each queue capped by its global max_running, jobs ready longer than `aging` first (oldest first), then by priority; fresh token and fence per job, lease from the DB clock (R1).
-- A running attempt is recorded on its jobs row (owner, token, fence, started_at); its audit row (the attempt
-- record) is written once, by whatever ends the attempt, so a claim inserts nothing into job_events.
WITH q AS (
    SELECT u.name, u.ord,
           CASE WHEN s.max_running IS NULL THEN %(limit)s::int
                ELSE greatest(0, least(%(limit)s::int, s.max_running - (
                    SELECT count(*)::int FROM {schema}.jobs r
                    WHERE r.status = 'running' AND r.queue_name = u.name))) END AS room
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS u(name, ord)
    LEFT JOIN {schema}.queues s ON s.name = u.name
    WHERE s.paused IS NOT TRUE
), aged AS (
    SELECT a.id, q.name, q.ord, a.rank
    FROM q CROSS JOIN LATERAL (
        SELECT id, row_number() OVER () AS rank FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name
              AND available_at <= now() - make_interval(secs => %(aging)s)
            ORDER BY available_at, id
            LIMIT q.room
            FOR UPDATE SKIP LOCKED) x
    ) a
), ranked AS (
    SELECT p.id, q.ord, p.rank
    FROM q CROSS JOIN LATERAL (
        SELECT id, row_number() OVER () AS rank FROM (
            SELECT id FROM {schema}.jobs
            WHERE status = 'pending' AND queue_name = q.name AND available_at <= now()
              AND id <> ALL (ARRAY(SELECT id FROM aged WHERE aged.name = q.name))
            ORDER BY priority DESC, available_at, id
            LIMIT greatest(0, q.room - (SELECT count(*)::int FROM aged WHERE aged.name = q.name))
            FOR UPDATE SKIP LOCKED) y
    ) p
), picked AS (
    SELECT id, row_number() OVER (ORDER BY ord, lane, rank) AS pos
    FROM (SELECT id, ord, 0 AS lane, rank FROM aged
          UNION ALL SELECT id, ord, 1, rank FROM ranked) c
    ORDER BY ord, lane, rank
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
              greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds, j.priority
)
SELECT c.* FROM claimed c JOIN picked p ON p.id = c.id ORDER BY p.pos;

-- name: jobs14_complete_many
-- Complete a batch of jobs, each a CAS on (id, running, worker, token); stale attempts are rejected and recorded.
-- The `completed` row is the attempt record: token, worker, attempt, and in `detail` its fence and start.
WITH done AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
), updated AS (
    UPDATE {schema}.jobs j
    SET status = 'completed', completed_at = now(), last_heartbeat_at = now(),
        lease_expires_at = NULL, locked_by = NULL, lock_token = NULL, updated_at = now()
    FROM done
    WHERE j.id = done.id AND j.status = 'running' AND j.locked_by = %(worker_id)s
      AND j.lock_token = done.token
    RETURNING j.id, j.queue_name, j.attempt_count, done.token, j.fence, j.started_at
), accepted AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, detail)
    SELECT id, queue_name, 'completed', token, %(worker_id)s, attempt_count,
           jsonb_build_object('fence', fence, 'started_at', started_at)
    FROM updated
), rejected AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason)
    SELECT d.id, coalesce(j.queue_name, ''), 'stale_completion_rejected', d.token, %(worker_id)s,
           -- the stale attempt's own number (the job's count has moved on): from the record that
           -- ended that attempt (a `claimed` row before issue 13), else from the row it still holds
           coalesce((SELECT c.attempt FROM {schema}.job_events c
                     WHERE c.job_id = d.id AND c.lock_token = d.token
                       AND (c.event = 'claimed' OR c.detail ? 'fence') ORDER BY c.id LIMIT 1),
                    CASE WHEN j.lock_token = d.token THEN j.attempt_count END),
           'token no longer current'
    FROM done d LEFT JOIN {schema}.jobs j ON j.id = d.id
    WHERE NOT EXISTS (SELECT 1 FROM updated u WHERE u.id = d.id)
)
SELECT d.id, (u.id IS NOT NULL) AS accepted
FROM done d LEFT JOIN updated u ON u.id = d.id;

-- name: prejobs14_claim
-- Claim up to `limit` ready jobs atomically (SKIP LOCKED): fresh token and fence per job, lease from the DB clock (R1).
-- A running attempt is recorded on its jobs row (owner, token, fence, started_at); its audit row (the attempt
-- record) is written once, by whatever ends the attempt, so a claim inserts nothing into job_events.
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
              greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds
)
SELECT * FROM claimed;

