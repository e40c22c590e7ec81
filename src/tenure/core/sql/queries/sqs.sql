-- `tenure sqs` (issue 25): SQS queues, their messages (jobs), FIFO deduplication and the
-- fenced visibility change; receiving also uses job_claim (lease), deleting job_complete_many.
-- Run by src/tenure/core/repository/sqs.py (SqsQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

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
-- Merge attributes into an SQS queue (SQS names, string values), remove the named ones (an empty Policy or RedrivePolicy) and stamp its modification time.
UPDATE {schema}.sqs_queues
SET attributes = (attributes || %(attributes)s::jsonb) - %(removed)s::text[], modified_at = now()
WHERE name = %(name)s
RETURNING name;

-- name: sqs_queue_lock
-- One SQS queue's attributes, its row locked to the end of the transaction (AddPermission and RemovePermission rewrite its Policy).
SELECT name, fifo, attributes FROM {schema}.sqs_queues WHERE name = %(name)s FOR UPDATE;

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
-- Insert SQS messages as jobs of one queue (one array element per message, with the trace context of its send span and its flow key: a standard queue's MessageGroupId, or NULL) and wake that queue's long polls.
WITH input AS (
    SELECT * FROM unnest(%(payloads)s::text[]::jsonb[], %(delays)s::float8[], %(trace_contexts)s::text[],
                         %(flow_keys)s::text[])
                  WITH ORDINALITY AS t(payload, delay, trace_context, flow_key, ord)
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, available_at, trace_context, flow_key)
    SELECT %(queue)s, %(task)s, payload, %(max_attempts)s, now() + make_interval(secs => delay), trace_context,
           flow_key
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
              j.priority, j.trace_context, j.flow_key
)
SELECT * FROM claimed ORDER BY id;

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

-- name: sqs_message_retention_expire
-- Delete up to `limit` messages (waiting or in flight) of SQS queues sent longer ago than their queue's MessageRetentionPeriod (`default` seconds when unset), audited as `expired` (reason `retention`); returns the count per queue. Only each queue's `limit` oldest live messages (by id) are looked at: one short index scan per queue.
WITH candidates AS (
    SELECT c.id FROM {schema}.sqs_queues q
    CROSS JOIN LATERAL (
        SELECT j.id, j.created_at FROM {schema}.jobs j
        WHERE j.queue_name = q.name AND j.status IN ('pending', 'running')
        ORDER BY j.id
        LIMIT %(limit)s
    ) c
    WHERE c.created_at <= now() - make_interval(secs => coalesce((q.attributes->>'MessageRetentionPeriod')::float8, %(default)s::float8))
    LIMIT %(limit)s
), picked AS (
    SELECT j.id FROM {schema}.jobs j JOIN candidates c ON c.id = j.id
    WHERE j.status IN ('pending', 'running') FOR UPDATE OF j SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.jobs j USING picked p WHERE j.id = p.id
    RETURNING j.id, j.queue_name, j.status, j.lock_token, j.attempt_count, j.created_at
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, lock_token, worker_id, attempt, reason, detail)
    SELECT id, queue_name, 'expired', lock_token, %(worker_id)s, attempt_count, 'retention',
           jsonb_build_object('status', status, 'sent_at', created_at)
    FROM gone
), receipts AS (
    DELETE FROM {schema}.sqs_receipts r USING gone g WHERE r.job_id = g.id
)
SELECT queue_name, count(*)::int AS expired FROM gone GROUP BY queue_name ORDER BY queue_name;

-- name: sqs_move_task_start
-- Record a running message move task (none if the source already has one running: no row); finished tasks older than 14 days are dropped, as SQS forgets them.
WITH pruned AS (
    DELETE FROM {schema}.sqs_move_tasks WHERE status <> 'RUNNING' AND finished_at < now() - interval '14 days'
), ins AS (
    INSERT INTO {schema}.sqs_move_tasks (handle, source_queue, source_arn, target_queue, destination_arn, rate, total, runner)
    VALUES (%(handle)s, %(source)s, %(source_arn)s, %(target)s, %(destination_arn)s, %(rate)s, %(total)s, %(runner)s)
    ON CONFLICT (source_queue) WHERE status = 'RUNNING' DO NOTHING
    RETURNING handle
)
SELECT handle FROM ins;

-- name: sqs_move_task_step
-- One batch of a running move task, if `runner` still runs it: move up to `limit` visible messages (oldest first) from source to target, audited, wake the target, add them to the task's count and heartbeat; no message left completes it. Returns the task's status (NULL: not this runner's running task any more) and counts.
WITH task AS (
    SELECT handle FROM {schema}.sqs_move_tasks WHERE handle = %(handle)s AND status = 'RUNNING' AND runner = %(runner)s FOR UPDATE
), picked AS (
    SELECT id FROM {schema}.jobs
    WHERE queue_name = %(source)s AND status = 'pending' AND available_at <= now() AND EXISTS (SELECT 1 FROM task)
    ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE {schema}.jobs j
    SET queue_name = %(target)s, attempt_count = 0, available_at = now(), updated_at = now()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason, detail)
    SELECT id, %(target)s, 'replayed_from_dead_letter', 'StartMessageMoveTask',
           jsonb_build_object('from', %(source)s::text, 'task', %(handle)s::text) FROM moved
), notified AS (
    SELECT pg_notify(%(channel)s, %(target)s) WHERE EXISTS (SELECT 1 FROM moved)
), counted AS (SELECT count(*)::bigint AS n FROM moved
), updated AS (
    UPDATE {schema}.sqs_move_tasks t
    SET moved = t.moved + c.n, heartbeat_at = now(),
        status = CASE WHEN c.n = 0 THEN 'COMPLETED' ELSE t.status END,
        finished_at = CASE WHEN c.n = 0 THEN now() END
    FROM task, counted c WHERE t.handle = task.handle
    RETURNING t.status, t.moved
)
SELECT u.status, coalesce(u.moved, 0)::bigint AS moved, (SELECT n FROM counted)::int AS step
FROM (SELECT 1) AS one LEFT JOIN updated u ON true
WHERE (SELECT count(*) FROM notified) >= 0;

-- name: sqs_move_task_fail
-- Mark a running move task of `runner` failed, with the reason.
UPDATE {schema}.sqs_move_tasks SET status = 'FAILED', failure = %(failure)s, finished_at = now()
WHERE handle = %(handle)s AND status = 'RUNNING' AND runner = %(runner)s RETURNING handle;

-- name: sqs_move_task_cancel
-- Cancel a running move task (its runner stops before its next batch); returns the task (`cancelled` false: it was not running), no row for an unknown handle.
WITH cancelled AS (
    UPDATE {schema}.sqs_move_tasks SET status = 'CANCELLED', finished_at = now()
    WHERE handle = %(handle)s AND status = 'RUNNING' RETURNING moved, status
)
SELECT moved, status, true AS cancelled FROM cancelled
UNION ALL
SELECT moved, status, false AS cancelled FROM {schema}.sqs_move_tasks WHERE handle = %(handle)s AND NOT EXISTS (SELECT 1 FROM cancelled);

-- name: sqs_move_task_list
-- The move tasks of a source queue (by ARN), newest first.
SELECT handle, status, source_arn, destination_arn, rate, moved, total, failure,
       (extract(epoch FROM started_at) * 1000)::bigint AS started_ms
FROM {schema}.sqs_move_tasks WHERE source_arn = %(source_arn)s ORDER BY started_at DESC, handle LIMIT %(limit)s;

-- name: sqs_move_task_adopt
-- Take over running move tasks whose runner's heartbeat is older than `stale` seconds (the runner stopped): they are `runner`'s now; returns what it needs to run them.
WITH stale AS (
    SELECT handle FROM {schema}.sqs_move_tasks
    WHERE status = 'RUNNING' AND heartbeat_at < now() - make_interval(secs => %(stale)s)
    ORDER BY started_at LIMIT 10 FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.sqs_move_tasks t SET runner = %(runner)s, heartbeat_at = now() FROM stale WHERE t.handle = stale.handle
RETURNING t.handle, t.source_queue, t.target_queue, t.rate;
