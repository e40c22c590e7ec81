-- The dead-letter queue (R12): list, controlled replay, purge (retention of completed and
-- cancelled jobs is in history.sql).
-- Run by src/tenure/core/repository/dlq.py (DeadLetterQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

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
-- The next batch of dead-lettered jobs to replay (by id list or by error code), oldest first, locked, each with the live job holding its unique key now (held_by, held_status; what a dry run reports: dlq_replay checks again as it writes).
SELECT j.id, j.queue_name, j.task, j.payload, j.payload_version, j.unique_key,
       (SELECT k.id FROM {schema}.jobs k
        WHERE k.unique_key = j.unique_key AND k.status = ANY (k.unique_states) AND k.id <> j.id
        ORDER BY k.id LIMIT 1) AS held_by,
       (SELECT k.status::text FROM {schema}.jobs k
        WHERE k.unique_key = j.unique_key AND k.status = ANY (k.unique_states) AND k.id <> j.id
        ORDER BY k.id LIMIT 1) AS held_status
FROM {schema}.jobs j
WHERE j.status = 'failed'
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND (%(queue)s::text IS NULL OR j.queue_name = %(queue)s::text)
  AND (%(error_code)s::text IS NULL OR j.last_error_code = %(error_code)s::text)
  AND j.id > %(after_id)s
ORDER BY j.id
LIMIT %(batch)s
FOR UPDATE OF j SKIP LOCKED;

-- name: dlq_mark_invalid
-- Record that a replay skipped a dead-lettered job because its payload fails validation.
INSERT INTO {schema}.job_events (job_id, queue_name, event, reason)
SELECT id, queue_name, 'replay_skipped_invalid', %(reason)s FROM {schema}.jobs WHERE id = %(id)s;

-- name: dlq_replay
-- Move dead-lettered jobs back to pending with a fresh attempt budget; only jobs still in the DLQ move (idempotent re-runs), and none whose unique key another live job holds or a lower id of the same call takes (returned with held_by and held_status: no look-up before the write).
WITH locked AS (
    SELECT id, unique_key FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'failed'
    ORDER BY id
    FOR UPDATE
), target AS (
    SELECT l.id, coalesce(h.id, l.first_id) AS held_by, coalesce(h.status::text, 'pending') AS held_status
    FROM (SELECT id, unique_key,
                 CASE WHEN unique_key IS NOT NULL
                      THEN nullif(first_value(id) OVER (PARTITION BY unique_key ORDER BY id), id) END AS first_id
          FROM locked) l
    LEFT JOIN LATERAL (
        SELECT k.id, k.status FROM {schema}.jobs k
        WHERE k.unique_key = l.unique_key AND k.status = ANY (k.unique_states) AND k.id <> l.id
        ORDER BY k.id LIMIT 1) h ON true
), updated AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', available_at = now(), attempt_count = 0, lease_expiry_count = 0,
        failed_at = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND t.held_by IS NULL
    RETURNING j.id, j.queue_name
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason)
    SELECT id, queue_name, 'replayed_from_dead_letter', %(reason)s FROM updated
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM updated) d
)
SELECT id, NULL::bigint AS held_by, NULL::text AS held_status FROM updated WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT id, held_by, held_status FROM target WHERE held_by IS NOT NULL
ORDER BY id;

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
