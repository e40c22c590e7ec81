-- Periodic schedules: the last slot enqueued per schedule, advanced and enqueued in one statement.
-- Run by src/tenure/core/repository/periodic.py (PeriodicQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: periodic_schedule_get
-- The last enqueued slot of each named schedule, with the DB clock.
SELECT name, last_slot, cron, timezone, enqueued_total, skipped_total, now() AS db_now
FROM {schema}.periodic_schedules WHERE name = ANY(%(names)s::text[]);

-- name: periodic_schedule_init
-- Register a schedule at its current slot without enqueueing it (a new schedule starts with the next slot); no-op if it exists.
INSERT INTO {schema}.periodic_schedules (name, task, queue_name, cron, timezone, last_slot)
VALUES (%(name)s, %(task)s, %(queue)s, %(cron)s, %(timezone)s, %(slot)s)
ON CONFLICT (name) DO NOTHING;

-- name: periodic_enqueue_slot
-- Advance one schedule to `slot` and enqueue its job in one statement; the row's CAS (last_slot < slot) and the job's idempotency key per (schedule, slot) make each slot enqueue exactly once however many schedulers race.
WITH advanced AS (
    UPDATE {schema}.periodic_schedules s
    SET last_slot = %(slot)s, cron = %(cron)s, timezone = %(timezone)s, task = %(task)s,
        queue_name = %(queue)s, enqueued_total = s.enqueued_total + 1,
        skipped_total = s.skipped_total + %(skipped)s, updated_at = now()
    WHERE s.name = %(name)s AND s.last_slot < %(slot)s
    RETURNING s.name
), key AS (
    INSERT INTO {schema}.job_keys (idempotency_key)
    SELECT %(idempotency_key)s::text FROM advanced
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, idempotency_key, priority)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(max_attempts)s, %(idempotency_key)s, %(priority)s
    FROM key
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s) FROM ins
)
SELECT id FROM ins WHERE (SELECT count(*) FROM notified) >= 0;
