-- Job and queue control (issue 14): cancel and retry by id, pause, resume and the running
-- limit; every change is audited with who asked.
-- Run by src/tenure/core/repository/control.py (ControlQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: job_cancel
-- Cancel jobs by id in one statement: waiting and pending ones at once; running ones by revoking their token (CAS on the token read), so the owner's next heartbeat reports the loss and its later writes are rejected. Every cancel is audited with who asked; a running job's cancel ends its attempt, so it is that attempt's record (fence, started_at).
WITH target AS (
    SELECT id, status, lock_token, locked_by, attempt_count, fence, started_at FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('waiting', 'pending', 'running')
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

-- name: job_retry_many
-- Put failed or cancelled jobs back as pending with a fresh attempt budget (like a DLQ replay); only jobs still in those states move, and none whose unique key another live job holds or a lower id of the same call takes (returned with held_by and held_status: no look-up before the write). Audited with who asked.
WITH locked AS (
    SELECT id, unique_key FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('failed', 'cancelled')
    ORDER BY id
    FOR UPDATE
), target AS (
    -- A key is held by a live job (in its covered states) or, among keyed jobs of this call, by
    -- the lowest id: the one that moves.
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
        failed_at = NULL, cancelled_at = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND t.held_by IS NULL
    RETURNING j.id, j.queue_name
), events AS (
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason, detail)
    SELECT id, queue_name, 'retried_by_request', 'requested by ' || %(requested_by)s::text,
           jsonb_build_object('requested_by', %(requested_by)s::text)
    FROM updated
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM updated) d
)
SELECT id, NULL::bigint AS held_by, NULL::text AS held_status FROM updated WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT id, held_by, held_status FROM target WHERE held_by IS NOT NULL
ORDER BY id;

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
