-- tenure schema: the state of a fresh database after every migration in sql/migrations.
-- Executed with search_path set to the target schema, so object names are unqualified.
-- A test applies the migrations in order and proves the result equals this file.

CREATE TYPE job_status AS ENUM ('pending', 'running', 'completed', 'failed', 'cancelled');

-- Global, strictly increasing fencing sequence (R5): each claim draws one value.
CREATE SEQUENCE job_fence_seq AS bigint;

CREATE TABLE jobs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name          text        NOT NULL DEFAULT 'default',
    task                text        NOT NULL,
    payload             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    payload_version     integer     NOT NULL DEFAULT 1,
    status              job_status  NOT NULL DEFAULT 'pending',
    attempt_count       integer     NOT NULL DEFAULT 0,
    max_attempts        integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_expiry_count  integer     NOT NULL DEFAULT 0,
    fence               bigint,
    available_at        timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    completed_at        timestamptz,
    failed_at           timestamptz,
    first_failed_at     timestamptz,
    last_failed_at      timestamptz,
    last_heartbeat_at   timestamptz,
    lease_expires_at    timestamptz,
    locked_by           text,
    lock_token          uuid,
    idempotency_key     text,
    correlation_id      text,
    last_error          text,
    last_error_code     text,
    checkpoint_step     text,
    checkpoint_data     jsonb,
    checkpoint_at       timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    priority            smallint    NOT NULL DEFAULT 0,
    cancelled_at        timestamptz,
    trace_context       text,
    flow_key            text,
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN -100 AND 100),
    CONSTRAINT jobs_flow_key_length CHECK (flow_key IS NULL OR octet_length(flow_key) BETWEEN 1 AND 200),
    CONSTRAINT jobs_running_has_lease CHECK (
        status <> 'running'
        OR (lock_token IS NOT NULL AND locked_by IS NOT NULL AND lease_expires_at IS NOT NULL)
    )
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

-- Claiming walks only ready rows: O(claimed), not O(table).
CREATE INDEX jobs_ready_idx ON jobs (queue_name, available_at, id) WHERE status = 'pending';
-- ... in priority order (higher first); jobs_ready_idx serves the starvation lane.
CREATE INDEX jobs_ready_priority_idx ON jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending';
-- Cancelled jobs (cancelled_at is set only while a job is cancelled; the enum value itself
-- cannot appear in an index predicate of the migration that adds it).
CREATE INDEX jobs_cancelled_idx ON jobs (queue_name, cancelled_at) WHERE cancelled_at IS NOT NULL;
-- Reaping and lease metrics walk only running rows.
CREATE INDEX jobs_running_lease_idx ON jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX jobs_running_queue_idx ON jobs (queue_name, started_at) WHERE status = 'running';
-- The dead-letter queue (status failed) and the retention pruner.
CREATE INDEX jobs_failed_idx ON jobs (queue_name, failed_at) WHERE status = 'failed';
CREATE INDEX jobs_completed_idx ON jobs (queue_name, completed_at) WHERE status = 'completed';
-- Enqueue-time deduplication (R13): one job per business operation key.
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The job browser's filters (0008): queue, task and finished status in id order, created_at ranges,
-- payload containment. The payload index leaves running rows out (0010): a claim writes none of
-- its entries, and the few running rows are read through jobs_running_lease_idx.
CREATE INDEX jobs_queue_id_idx ON jobs (queue_name, id);
CREATE INDEX jobs_task_id_idx ON jobs (task, id);
CREATE INDEX jobs_finished_idx ON jobs (status, id) WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX jobs_created_idx ON jobs USING brin (created_at);
CREATE INDEX jobs_payload_idx ON jobs USING gin (payload jsonb_path_ops) WHERE status <> 'running';
-- Flow keys (0011): running jobs per key (the claim's per-key count), ready jobs per key (the
-- blocked counts), and a key's jobs in id order (`jobs list --flow-key`). Keyed rows only.
CREATE INDEX jobs_flow_running_idx ON jobs (queue_name, flow_key) WHERE status = 'running' AND flow_key IS NOT NULL;
CREATE INDEX jobs_flow_ready_idx ON jobs (queue_name, flow_key, available_at)
    WHERE status = 'pending' AND flow_key IS NOT NULL;
CREATE INDEX jobs_flow_key_id_idx ON jobs (flow_key, id) WHERE flow_key IS NOT NULL;

-- Append-only audit of every transition, with the DB time it happened.
CREATE TABLE job_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    queue_name  text        NOT NULL,
    event       text        NOT NULL,
    lock_token  uuid,
    worker_id   text,
    attempt     integer,
    reason      text,
    detail      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_job_idx ON job_events (job_id, id);
CREATE INDEX job_events_reaped_idx ON job_events (queue_name, created_at)
    WHERE event IN ('reaped_due_to_expired_lease', 'reaped_to_dead_letter');
CREATE INDEX job_events_stale_idx ON job_events (queue_name, created_at)
    WHERE event IN ('stale_completion_rejected', 'stale_write_rejected');
CREATE INDEX job_events_created_idx ON job_events USING brin (created_at);

-- Worker registry (R9). A worker id is fresh per process, never a host or pod name.
CREATE TABLE workers (
    id                  text PRIMARY KEY,
    host                text        NOT NULL,
    pid                 integer     NOT NULL,
    queues              text[]      NOT NULL,
    concurrency         integer     NOT NULL,
    heartbeat_seconds   double precision NOT NULL,
    version             text        NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    stopped_at          timestamptz,
    lease_seconds       double precision,
    abandoned_threads   integer     NOT NULL DEFAULT 0
);
CREATE INDEX workers_last_seen_idx ON workers (last_seen_at) WHERE stopped_at IS NULL;

-- Execution store for effectively-once side effects (R14).
CREATE TABLE job_executions (
    idempotency_key  text PRIMARY KEY,
    status           text        NOT NULL CHECK (status IN ('processing', 'succeeded', 'retrying', 'failed')),
    job_id           bigint,
    lock_token       uuid,
    attempt_count    integer     NOT NULL DEFAULT 1,
    lease_until      timestamptz,
    claimed_at       timestamptz NOT NULL DEFAULT now(),
    result_ref       text,
    last_error_code  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    succeeded_at     timestamptz
);
CREATE INDEX job_executions_processing_idx ON job_executions (lock_token) WHERE status = 'processing';
-- The effects of one job, for its page in the job browser (0007).
CREATE INDEX job_executions_job_idx ON job_executions (job_id);

-- One row counting every reaper cycle (any reaper process), for the exporter (0003).
CREATE TABLE reaper_cycles (
    id                boolean     PRIMARY KEY DEFAULT true CHECK (id),
    cycles            bigint      NOT NULL DEFAULT 0,
    last_finished_at  timestamptz NOT NULL DEFAULT now(),
    last_seconds      double precision NOT NULL DEFAULT 0,
    last_reaped       integer     NOT NULL DEFAULT 0,
    last_reaper_id    text
);

-- Per-queue controls (pause, global running limit), one row per queue ever paused or limited (0004).
CREATE TABLE queues (
    name         text PRIMARY KEY,
    paused       boolean     NOT NULL DEFAULT false,
    max_running  integer     CHECK (max_running IS NULL OR max_running >= 1),
    paused_at    timestamptz,
    updated_by   text,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    per_key_running integer  CHECK (per_key_running IS NULL OR per_key_running >= 1)
);

-- Per-key running limits that override a queue's per_key_running for one flow key (0011).
CREATE TABLE flow_keys (
    queue_name  text        NOT NULL,
    flow_key    text        NOT NULL CHECK (octet_length(flow_key) BETWEEN 1 AND 200),
    running     integer     NOT NULL CHECK (running >= 1),
    updated_by  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, flow_key)
);

-- Append-only record of every flow-control change: who, when, what, from and to (0011).
CREATE TABLE flow_changes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text        NOT NULL,
    queue_name  text        NOT NULL,
    flow_key    text,
    setting     text        NOT NULL,
    old_value   text,
    new_value   text
);
CREATE INDEX flow_changes_queue_idx ON flow_changes (queue_name, id);

-- Periodic schedules: the last slot enqueued per schedule (bounds catch-up, survives pruning) (0004).
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

-- SQS queues of `tenure sqs` (issue 25): one row per SQS queue; its messages are the jobs of the
-- tenure queue of the same name. Attributes are SQS's own names and string values (0005).
CREATE TABLE sqs_queues (
    name         text PRIMARY KEY,
    fifo         boolean     NOT NULL DEFAULT false,
    attributes   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    tags         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    purged_at    timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    modified_at  timestamptz NOT NULL DEFAULT now()
);

-- A message's first receive (ApproximateFirstReceiveTimestamp) (0005). Deleted by the statements
-- that delete its job (0009: no foreign key, whose cascade cost every completion a trigger).
CREATE TABLE sqs_receipts (
    job_id             bigint PRIMARY KEY,
    first_received_at  timestamptz NOT NULL DEFAULT now()
);

-- FIFO deduplication: a MessageDeduplicationId is remembered for 5 minutes per queue (0005).
CREATE TABLE sqs_dedup (
    queue_name  text        NOT NULL,
    dedup_id    text        NOT NULL,
    job_id      bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, dedup_id)
);

-- The key of the receipt handles' HMAC, shared by every `tenure sqs` replica (0005).
CREATE TABLE sqs_secrets (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    hmac_key    bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Message move tasks of `tenure sqs` (0013): every replica lists and cancels them; a running
-- task whose runner's heartbeat is stale is resumed by another replica (docs/sqs.md).
CREATE TABLE sqs_move_tasks (
    handle           text        PRIMARY KEY,
    source_queue     text        NOT NULL,
    source_arn       text        NOT NULL,
    target_queue     text        NOT NULL,
    destination_arn  text,
    rate             integer     CHECK (rate IS NULL OR rate >= 1),
    total            bigint      NOT NULL,
    moved            bigint      NOT NULL DEFAULT 0,
    status           text        NOT NULL DEFAULT 'RUNNING'
                     CHECK (status IN ('RUNNING', 'COMPLETED', 'CANCELLED', 'FAILED')),
    failure          text,
    runner           text        NOT NULL,
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE UNIQUE INDEX sqs_move_tasks_running_idx ON sqs_move_tasks (source_queue) WHERE status = 'RUNNING';
CREATE INDEX sqs_move_tasks_source_idx ON sqs_move_tasks (source_arn, started_at DESC);

-- Finished jobs (0009): completed jobs move here from `jobs` in the statement that completes them,
-- into day partitions of completed_at (UTC); see docs/architecture.md "Where finished jobs live".
-- It has the columns of jobs, in the same order (the moves copy whole rows): a column added to
-- jobs is added here in the same migration and all_jobs is recreated, or
-- tests/integration/test_history.py (test_jobs_and_job_history_have_the_same_columns) fails.
CREATE TABLE job_history (
    LIKE jobs INCLUDING DEFAULTS,
    CONSTRAINT job_history_completed CHECK (status = 'completed' AND completed_at IS NOT NULL)
) PARTITION BY RANGE (completed_at);
-- Day partitions (job_history_pYYYYMMDD) are created ahead of need by job_history_ensure;
-- a completion on a day without one lands here, and the next ensure moves it to its day.
CREATE TABLE job_history_default PARTITION OF job_history DEFAULT;
CREATE INDEX job_history_id_idx ON job_history (id);
CREATE INDEX job_history_queue_id_idx ON job_history (queue_name, id);
CREATE INDEX job_history_task_id_idx ON job_history (task, id);
CREATE INDEX job_history_queue_completed_idx ON job_history (queue_name, completed_at);
CREATE INDEX job_history_key_idx ON job_history (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX job_history_created_idx ON job_history USING brin (created_at);
CREATE INDEX job_history_payload_idx ON job_history USING gin (payload jsonb_path_ops);
CREATE INDEX job_history_flow_key_id_idx ON job_history (flow_key, id) WHERE flow_key IS NOT NULL;

-- Every job, wherever it lives: the readers' table (job pages, listings, the browser, counts).
-- The CHECK above lets the planner skip job_history for any status but completed.
CREATE OR REPLACE VIEW all_jobs AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM job_history;

-- Enqueue-time deduplication (R13) across both tables: a key is inserted here when its job is
-- enqueued (and when a job enqueued by an older tenure moves to history), and deleted when its
-- job is pruned or purged.
CREATE TABLE job_keys (
    idempotency_key  text PRIMARY KEY,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- Create the day partitions from first_day to last_day (UTC days) that do not exist yet, moving
-- any rows of those days out of the default partition first; returns how many it created.
-- Serialised per schema by an advisory lock; gives up after 2 s waiting for a table lock.
CREATE OR REPLACE FUNCTION job_history_ensure(sch text, first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    day date := first_day;
    part text;
    lo timestamptz;
    hi timestamptz;
    made integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('tenure.history:' || sch, 0));
    PERFORM set_config('lock_timeout', '2s', true);
    WHILE day <= last_day LOOP
        part := 'job_history_p' || to_char(day, 'YYYYMMDD');
        IF to_regclass(format('%I.%I', sch, part)) IS NULL THEN
            lo := day::timestamp AT TIME ZONE 'UTC';
            hi := (day + 1)::timestamp AT TIME ZONE 'UTC';
            EXECUTE format('CREATE TABLE %I.%I (LIKE %I.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           sch, part, sch);
            EXECUTE format('WITH moved AS (DELETE FROM %I.job_history_default WHERE completed_at >= %L '
                           'AND completed_at < %L RETURNING *) INSERT INTO %I.%I SELECT * FROM moved',
                           sch, lo, hi, sch, part);
            EXECUTE format('ALTER TABLE %I.job_history ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                           sch, sch, part, lo, hi);
            made := made + 1;
        END IF;
        day := day + 1;
    END LOOP;
    RETURN made;
END
$fn$;

-- Drop the oldest day partition that ended before `cutoff`, with its jobs' audit events and
-- idempotency keys; returns how many jobs it held, NULL when no partition is that old.
CREATE OR REPLACE FUNCTION job_history_drop_oldest(sch text, cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    part text;
    held bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('tenure.history:' || sch, 0));
    PERFORM set_config('lock_timeout', '2s', true);
    SELECT c.relname INTO part
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass(format('%I.job_history', sch))
      AND c.relname ~ '^job_history_p[0-9]{8}$'
      AND (to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff
    ORDER BY c.relname
    LIMIT 1;
    IF part IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I.%I', sch, part) INTO held;
    EXECUTE format('DELETE FROM %I.job_events e WHERE e.job_id IN (SELECT id FROM %I.%I)', sch, sch, part);
    EXECUTE format('DELETE FROM %I.job_keys k WHERE k.idempotency_key IN '
                   '(SELECT idempotency_key FROM %I.%I WHERE idempotency_key IS NOT NULL)', sch, sch, part);
    EXECUTE format('DROP TABLE %I.%I', sch, part);
    RETURN held;
END
$fn$;

-- The depth of every queue once a minute, written by the reaper, kept 8 days (0012; the job
-- browser's depth chart).
CREATE TABLE queue_depth_samples (
    sampled_at  timestamptz NOT NULL,
    queue_name  text        NOT NULL,
    ready       bigint      NOT NULL,
    blocked     bigint      NOT NULL,
    running     bigint      NOT NULL,
    PRIMARY KEY (sampled_at, queue_name)
);

CREATE TABLE schema_migrations (
    version     integer PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
