-- Reads: a job and its events, queue figures (queue_stats, shared by `tenure stats`, the
-- exporter and the operator), the wake-up LISTEN, the database clock and the doctor's views.
-- Run by src/tenure/core/repository/reads.py (ReadQueries); none of them writes.
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

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
), waiting AS (
    SELECT queue_name, count(*) AS waiting FROM {schema}.jobs
    WHERE status = 'waiting' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
    GROUP BY queue_name
), queues AS (
    SELECT queue_name FROM pending UNION SELECT queue_name FROM running
    UNION SELECT queue_name FROM failed UNION SELECT queue_name FROM live
    UNION SELECT queue_name FROM reaped UNION SELECT queue_name FROM ctl
    UNION SELECT queue_name FROM cancelled UNION SELECT queue_name FROM waiting
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
       coalesce(cx.cancelled, 0)::bigint AS cancelled,
       coalesce(wt.waiting, 0)::bigint AS waiting
FROM queues q
LEFT JOIN pending p USING (queue_name)
LEFT JOIN running r USING (queue_name)
LEFT JOIN failed f USING (queue_name)
LEFT JOIN live l USING (queue_name)
LEFT JOIN reaped rp USING (queue_name)
LEFT JOIN ctl c USING (queue_name)
LEFT JOIN cancelled cx USING (queue_name)
LEFT JOIN waiting wt USING (queue_name)
WHERE %(queue)s::text IS NULL OR q.queue_name = %(queue)s::text
ORDER BY q.queue_name;

-- name: queue_completed_counts
-- Completed jobs per queue: a scan of the completed partial index, so callers read it on a slower cadence than queue_stats.
SELECT queue_name AS queue, count(*)::bigint AS completed
FROM {schema}.all_jobs
WHERE status = 'completed' AND (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
GROUP BY queue_name ORDER BY queue_name;

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

-- name: job_status_many
-- The status of each of the given job ids (missing ids are absent), to validate a command before it writes.
SELECT id, status::text AS status, queue_name, task, payload, payload_version
FROM {schema}.all_jobs WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id;

-- name: queue_flow_blocked
-- Per queue of `queues`: runnable jobs flow control holds back, by reason (docs/flow.md), the keys at their running limit, and on a flow queue the oldest runnable job nothing holds back.
-- A job counts once, under the first reason that holds: `concurrency`, its key's ready jobs
-- beyond the key's room (running limit minus running jobs); `backpressure`, its rate limit's
-- bucket (the key's for a per_key limit, else the shared one, flow_key '') is paused;
-- `rate`, that bucket holds fewer tokens now than the job's units (no bucket: full, burst).
-- Jobs short of tokens count only beyond their key's concurrency-held jobs (they may be the
-- same jobs), so ready (runnable minus blocked) never counts a job twice.
-- A flow queue has a running limit per key, keyed pending jobs or ready jobs naming a rate
-- limit. When `oldest` is true, its `oldest_unblocked` job is the first runnable one in
-- (available_at, id) order that the claim would not pass over: its key is under its running
-- limit, and no job of its key (jobs without a key are one key) as old as it or older is short
-- of tokens or paused, since the claim takes a key's jobs first in, first out. It is looked for
-- among the queue's `walk` oldest runnable jobs (none found, or the queue paused: NULL).
-- Reads: per-key counts of limited queues (jobs_flow_ready_idx, jobs_flow_running_idx), the
-- ready jobs naming a rate limit (jobs_rate_ready_idx), a probe per queue for a keyed pending
-- and a rate-limited ready job, and at most `walk` rows of jobs_ready_idx per flow queue.
WITH q AS (
    SELECT u.name, s.per_key_running, coalesce(s.paused, false) AS paused
    FROM unnest(%(queues)s::text[]) AS u(name) LEFT JOIN {schema}.queues s ON s.name = u.name
), limited AS (
    SELECT q.name, q.per_key_running FROM q
    WHERE q.per_key_running IS NOT NULL
       OR EXISTS (SELECT 1 FROM {schema}.flow_keys f WHERE f.queue_name = q.name AND f.running IS NOT NULL)
), running AS (
    SELECT j.queue_name, j.flow_key, count(*)::int AS n FROM {schema}.jobs j
    WHERE j.status = 'running' AND j.flow_key IS NOT NULL AND j.queue_name IN (SELECT name FROM limited)
    GROUP BY j.queue_name, j.flow_key
), ready AS (
    SELECT j.queue_name, j.flow_key, count(*)::int AS n FROM {schema}.jobs j
    WHERE j.status = 'pending' AND j.flow_key IS NOT NULL AND j.available_at <= now()
      AND j.queue_name IN (SELECT name FROM limited)
    GROUP BY j.queue_name, j.flow_key
), capped AS (
    SELECT coalesce(r.queue_name, d.queue_name) AS queue_name, coalesce(r.flow_key, d.flow_key) AS flow_key,
           coalesce(r.n, 0) >= coalesce(f.running, l.per_key_running) AS at_limit,
           greatest(0, coalesce(d.n, 0) - greatest(0, coalesce(f.running, l.per_key_running) - coalesce(r.n, 0)))
               AS held
    FROM running r
    FULL JOIN ready d ON d.queue_name = r.queue_name AND d.flow_key = r.flow_key
    JOIN limited l ON l.name = coalesce(r.queue_name, d.queue_name)
    LEFT JOIN {schema}.flow_keys f
           ON f.queue_name = coalesce(r.queue_name, d.queue_name) AND f.flow_key = coalesce(r.flow_key, d.flow_key)
    WHERE coalesce(f.running, l.per_key_running) IS NOT NULL
), short AS (
    SELECT r.queue_name, r.flow_key, count(*) FILTER (WHERE r.reason = 'backpressure') AS bp,
           count(*) FILTER (WHERE r.reason = 'rate') AS rt, min(r.available_at) AS held_from
    FROM (
        SELECT j.queue_name, j.flow_key, j.available_at,
               CASE WHEN b.paused_until > now() THEN 'backpressure'
                    WHEN coalesce(least(l.burst, b.tokens + l.per_second
                                                 * greatest(0, extract(epoch FROM now() - b.refilled_at)::float8)),
                                  l.burst) < j.rate_units THEN 'rate' END AS reason
        FROM {schema}.jobs j
        JOIN {schema}.rate_limits l ON l.name = j.rate_limit
        LEFT JOIN {schema}.rate_buckets b
               ON b.limit_name = j.rate_limit
              AND b.flow_key = CASE WHEN l.per_key THEN coalesce(j.flow_key, '') ELSE '' END
        WHERE j.status = 'pending' AND j.rate_limit IS NOT NULL AND j.available_at <= now()
          AND j.queue_name = ANY(%(queues)s::text[])
    ) r
    WHERE r.reason IS NOT NULL
    GROUP BY r.queue_name, r.flow_key
), per_key AS (
    SELECT coalesce(c.queue_name, s.queue_name) AS queue_name, coalesce(c.held, 0) AS held,
           coalesce(s.bp, 0) AS bp, coalesce(s.rt, 0) AS rt, coalesce(c.at_limit, false) AS at_limit
    FROM capped c FULL JOIN short s ON s.queue_name = c.queue_name AND s.flow_key = c.flow_key
), totals AS (
    SELECT queue_name, sum(held) AS concurrency,
           sum(least(bp, greatest(0, bp + rt - held))) AS backpressure,
           sum(greatest(0, bp + rt - held) - least(bp, greatest(0, bp + rt - held))) AS rate,
           count(*) FILTER (WHERE at_limit) AS keys_at_limit
    FROM per_key GROUP BY queue_name
), flowq AS (
    SELECT q.name, q.paused FROM q
    WHERE q.name IN (SELECT name FROM limited)
       OR (SELECT k.flow_key FROM {schema}.jobs k WHERE k.status = 'pending' AND k.flow_key IS NOT NULL
           AND k.queue_name = q.name ORDER BY k.queue_name, k.flow_key LIMIT 1) IS NOT NULL
       OR (SELECT k.rate_limit FROM {schema}.jobs k WHERE k.status = 'pending' AND k.rate_limit IS NOT NULL
           AND k.queue_name = q.name AND k.available_at <= now() ORDER BY k.queue_name, k.rate_limit LIMIT 1) IS NOT NULL
), oldest AS (
    SELECT fq.name, w.id, w.available_at FROM flowq fq
    LEFT JOIN LATERAL (
        SELECT j.id, j.available_at FROM (
            SELECT r.id, r.available_at, r.queue_name, r.flow_key FROM {schema}.jobs r
            WHERE r.status = 'pending' AND r.queue_name = fq.name AND r.available_at <= now()
              AND %(oldest)s::boolean AND NOT fq.paused
            ORDER BY r.available_at, r.id LIMIT %(walk)s::int
        ) j
        WHERE NOT EXISTS (SELECT 1 FROM capped c
                          WHERE c.queue_name = j.queue_name AND c.flow_key = j.flow_key AND c.at_limit)
          AND NOT EXISTS (SELECT 1 FROM short h
                          WHERE h.queue_name = j.queue_name AND coalesce(h.flow_key, '') = coalesce(j.flow_key, '')
                            AND h.held_from <= j.available_at)
        ORDER BY j.available_at, j.id LIMIT 1
    ) w ON true
)
SELECT q.name AS queue,
       coalesce(t.concurrency, 0)::bigint AS blocked_concurrency,
       coalesce(t.backpressure, 0)::bigint AS blocked_backpressure,
       coalesce(t.rate, 0)::bigint AS blocked_rate,
       coalesce(t.keys_at_limit, 0)::int AS keys_at_limit,
       o.name IS NOT NULL AS flow,
       coalesce(extract(epoch FROM now() - o.available_at)::float8, 0) AS oldest_unblocked_wait_seconds,
       o.id AS oldest_unblocked_job_id
FROM q
LEFT JOIN totals t ON t.queue_name = q.name
LEFT JOIN oldest o ON o.name = q.name
ORDER BY q.name;
