-- 0004_job_control: cancel, priorities, pause/resume, a global per-queue running limit and
-- periodic schedules (issue 14). Nothing here uses the new enum value: PostgreSQL refuses a
-- value added by ALTER TYPE ... ADD VALUE inside the transaction that added it.
ALTER TYPE job_status ADD VALUE IF NOT EXISTS 'cancelled';

-- Higher runs first; the range is documented in the README (Priorities).
ALTER TABLE jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD CONSTRAINT jobs_priority_range CHECK (priority BETWEEN -100 AND 100);
ALTER TABLE jobs ADD COLUMN cancelled_at timestamptz;

-- The claim walks ready rows in priority order; jobs_ready_idx (oldest first) stays for the
-- starvation lane (jobs ready longer than the aging bound are claimed first, oldest first).
CREATE INDEX jobs_ready_priority_idx ON jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending';
-- Cancelled jobs (cancelled_at is set only while a job is cancelled; the enum value itself
-- cannot appear in an index predicate of the migration that adds it).
CREATE INDEX jobs_cancelled_idx ON jobs (queue_name, cancelled_at) WHERE cancelled_at IS NOT NULL;

-- Per-queue controls, one row per queue that has ever been paused or limited.
CREATE TABLE queues (
    name         text PRIMARY KEY,
    paused       boolean     NOT NULL DEFAULT false,
    max_running  integer     CHECK (max_running IS NULL OR max_running >= 1),
    paused_at    timestamptz,
    updated_by   text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Periodic schedules: the last slot enqueued per schedule (the per-slot idempotency key on the
-- job is the exactly-once guarantee; this row bounds catch-up and survives job pruning).
CREATE TABLE periodic_schedules (
    name            text PRIMARY KEY,
    task            text        NOT NULL,
    queue_name      text        NOT NULL,
    cron            text        NOT NULL,
    timezone        text        NOT NULL DEFAULT 'UTC',
    last_slot       timestamptz NOT NULL,
    enqueued_total  bigint      NOT NULL DEFAULT 0,
    skipped_total   bigint      NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
