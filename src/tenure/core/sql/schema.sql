-- tenure schema: the state of a fresh database after every migration in sql/migrations.
-- Executed with search_path set to the target schema, so object names are unqualified.
-- A test applies the migrations in order and proves the result equals this file.

CREATE TYPE job_status AS ENUM ('pending', 'running', 'completed', 'failed', 'cancelled', 'waiting');

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
    rate_limit          text,
    rate_units          integer     NOT NULL DEFAULT 1,
    unique_key          text,
    unique_states       job_status[],
    workflow_id         bigint,
    batch_id            bigint,
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN -100 AND 100),
    CONSTRAINT jobs_flow_key_length CHECK (flow_key IS NULL OR octet_length(flow_key) BETWEEN 1 AND 200),
    CONSTRAINT jobs_rate_units_range CHECK (rate_units BETWEEN 1 AND 1000000),
    CONSTRAINT jobs_running_has_lease CHECK (
        status <> 'running'
        OR (lock_token IS NOT NULL AND locked_by IS NOT NULL AND lease_expires_at IS NOT NULL)
    ),
    -- Unique jobs (0015, docs/unique.md): a key covers pending and running, never completed.
    CONSTRAINT jobs_unique_states_valid CHECK (
        unique_key IS NULL
        OR (unique_states @> '{pending,running}'::job_status[] AND NOT 'completed'::job_status = ANY (unique_states)
            AND octet_length(unique_key) BETWEEN 64 AND 100))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

-- Claiming walks only ready rows: O(claimed), not O(table).
CREATE INDEX jobs_ready_idx ON jobs (queue_name, available_at, id) WHERE status = 'pending';
-- ... in priority order (higher first), without a flow key (0014: keyed jobs are claimed by
-- flow_claim through jobs_flow_level_idx); jobs_ready_idx serves the starvation lane.
CREATE INDEX jobs_ready_priority_idx ON jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending' AND flow_key IS NULL;
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
-- Unique jobs (0015, docs/unique.md): one job per unique key among jobs in their key's states;
-- enqueues conflict here (ON CONFLICT), never by a look-up first. Jobs without a key have no entry.
CREATE UNIQUE INDEX jobs_unique_key_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status = ANY (unique_states);
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
-- flow_claim (0014): keyed ready jobs by priority level and key, and rate-limited ready jobs.
CREATE INDEX jobs_flow_level_idx ON jobs (queue_name, priority, flow_key, available_at, id)
    WHERE status = 'pending' AND flow_key IS NOT NULL;
CREATE INDEX jobs_rate_ready_idx ON jobs (queue_name, rate_limit, available_at)
    WHERE status = 'pending' AND rate_limit IS NOT NULL;

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
    per_key_running integer  CHECK (per_key_running IS NULL OR per_key_running >= 1),
    flow_cursor  text
);

-- One flow key's own settings in a queue (0011): a running limit that overrides the queue's
-- per_key_running, and (0014) a fairness weight, with the deficit its claims carry over.
CREATE TABLE flow_keys (
    queue_name  text        NOT NULL,
    flow_key    text        NOT NULL CHECK (octet_length(flow_key) BETWEEN 1 AND 200),
    running     integer     CHECK (running >= 1),
    updated_by  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    weight      double precision NOT NULL DEFAULT 1,
    deficit     double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_name, flow_key),
    CONSTRAINT flow_keys_weight_range CHECK (weight > 0 AND weight <= 1000),
    CONSTRAINT flow_keys_has_setting CHECK (running IS NOT NULL OR weight <> 1)
);

-- Append-only record of every flow-control change: who, when, what, from and to (0011).
CREATE TABLE flow_changes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text        NOT NULL,
    queue_name  text,
    flow_key    text,
    setting     text        NOT NULL,
    old_value   text,
    new_value   text,
    rate_limit  text
);
CREATE INDEX flow_changes_queue_idx ON flow_changes (queue_name, id);
CREATE INDEX flow_changes_rate_limit_idx ON flow_changes (rate_limit, id) WHERE rate_limit IS NOT NULL;

-- Named rate limits (0014): a token bucket refilled at per_second up to burst, shared by every
-- job that names it, in any queue; per_key keeps one bucket per flow key.
CREATE TABLE rate_limits (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'),
    per_second  double precision NOT NULL CHECK (per_second > 0 AND per_second <= 1000000),
    burst       integer     NOT NULL CHECK (burst BETWEEN 1 AND 1000000),
    per_key     boolean     NOT NULL DEFAULT false,
    updated_by  text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The buckets of rate_limits (0014): one per limit (flow_key ''), or one per flow key of a
-- per-key limit, created by the first claim that needs it. paused_until is a handler's
-- back-pressure (ctx.rate_limited): no token is taken before it.
CREATE TABLE rate_buckets (
    limit_name    text        NOT NULL REFERENCES rate_limits (name) ON DELETE CASCADE,
    flow_key      text        NOT NULL DEFAULT '',
    tokens        double precision NOT NULL,
    refilled_at   timestamptz NOT NULL DEFAULT now(),
    paused_until  timestamptz,
    PRIMARY KEY (limit_name, flow_key)
);

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

-- The rollup of the job browser's charts, written by the reaper (0016): the periods rolled up
-- (hours, kept 8 days; quarter hours, kept 25 hours), then per queue and period the counts and
-- the wait histograms (by period of start).
CREATE TABLE queue_series_rollups (
    seconds     integer     NOT NULL CHECK (seconds IN (900, 3600)),
    period      timestamptz NOT NULL,
    rolled_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seconds, period)
);

CREATE TABLE queue_series_periods (
    seconds          integer     NOT NULL,
    period           timestamptz NOT NULL,
    queue_name       text        NOT NULL,
    completed        bigint      NOT NULL,
    failed_attempts  bigint      NOT NULL,
    dead_lettered    bigint      NOT NULL,
    PRIMARY KEY (seconds, period, queue_name),
    FOREIGN KEY (seconds, period) REFERENCES queue_series_rollups ON DELETE CASCADE
);

CREATE TABLE queue_wait_periods (
    seconds         integer     NOT NULL,
    period          timestamptz NOT NULL,
    queue_name      text        NOT NULL,
    started_period  timestamptz NOT NULL,
    wait_buckets    smallint[]  NOT NULL,
    jobs            integer[]   NOT NULL,
    PRIMARY KEY (seconds, period, queue_name, started_period),
    FOREIGN KEY (seconds, period) REFERENCES queue_series_rollups ON DELETE CASCADE
);

CREATE TABLE schema_migrations (
    version     integer PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Take `units` tokens from the bucket of limit `lim` (the bucket of flow key `key` for a per-key
-- limit), refilled by the database clock: NULL when taken, else the earliest time the bucket can
-- have them (after a handler's pause, counted from its end; 10 ms on when another claim holds the
-- bucket). An unknown limit (deleted since the job was enqueued) limits nothing. The bucket's row
-- stays locked to the end of the transaction, so no two claims spend one token.
CREATE OR REPLACE FUNCTION rate_take(lim text, units integer, key text) RETURNS timestamptz
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    r record;
    b record;
    bucket text;
    have double precision;
    need integer;
BEGIN
    SELECT per_second, burst, per_key INTO r FROM rate_limits WHERE name = lim;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    bucket := CASE WHEN r.per_key THEN coalesce(key, '') ELSE '' END;
    -- Claims of different queues may need the same buckets in any order: never wait for one
    -- (a wait could deadlock); a bucket another claim holds is busy for a moment.
    SELECT tokens, refilled_at, paused_until INTO b
    FROM rate_buckets WHERE limit_name = lim AND flow_key = bucket FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Creating it must not wait either: an insert of the same bucket by a claim not yet
        -- committed would make this one wait, while that claim may wait for a queue this one holds.
        IF EXISTS (SELECT 1 FROM rate_buckets WHERE limit_name = lim AND flow_key = bucket)
           OR NOT pg_try_advisory_xact_lock(hashtextextended('tenure.rate:' || current_schema() || ':' || lim
                                                             || ':' || bucket, 0)) THEN
            RETURN now() + interval '10 milliseconds';
        END IF;
        INSERT INTO rate_buckets (limit_name, flow_key, tokens, refilled_at)
        VALUES (lim, bucket, r.burst, now()) ON CONFLICT DO NOTHING;
        SELECT tokens, refilled_at, paused_until INTO b
        FROM rate_buckets WHERE limit_name = lim AND flow_key = bucket FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN now() + interval '10 milliseconds';
        END IF;
    END IF;
    -- A job that needs more than the burst (lowered since it was enqueued) takes a full bucket.
    need := least(units, r.burst);
    IF b.paused_until > now() THEN
        RETURN b.paused_until + make_interval(secs => need / r.per_second);
    END IF;
    have := least(r.burst, b.tokens + r.per_second * greatest(0, extract(epoch FROM now() - b.refilled_at)));
    IF have < need THEN
        RETURN now() + make_interval(secs => (need - have) / r.per_second);
    END IF;
    -- Never back in time: a claim whose transaction began before the last one's must not count
    -- the refill between the two twice.
    UPDATE rate_buckets SET tokens = have - need, refilled_at = greatest(b.refilled_at, now()), paused_until = NULL
    WHERE limit_name = lim AND flow_key = bucket;
    RETURN NULL;
END
$fn$;

-- Claim up to `want` ready jobs of queue `q` fairly across its flow keys, within every limit: the
-- queue's max_running, each key's running limit and each job's rate limit (docs/flow.md). Returns
-- the claimed jobs in claim order, then, when a rate limit held a job back, one row whose id is
-- NULL and whose lease_expires_at is the earliest time a blocked bucket has its tokens again
-- (wait_seconds: how long from now).
-- Lanes, in order: jobs ready longer than `aging` seconds (of the oldest 4x the room, one per key,
-- the keys round-robin from the cursor), then each priority level with ready jobs, highest first.
-- In a level, keys are visited round-robin in key order from the queue's cursor (jobs without a
-- key are one key, first in the ring); a visit takes the key's weight in jobs (deficit
-- round-robin: a fraction carries over; a visit cut short by the room or a bucket is finished by
-- the next claim), FIFO within the key. A key at its running limit, or whose bucket is short, is
-- skipped for the rest of the call. At most 8x the room + 64 key probes per call; the cursor moves
-- past keys stepped over (except after a key its bucket held back, which keeps its turn), so the
-- next claim carries on from there. Locks the queue's control row (creating it) to the end of the
-- transaction, so the claims of a queue serialise and every count sees every claim; a caller
-- claiming several queues locks them first, in name order (queue_flow_lock).
-- The lease columns are set as in job_claim (claim.sql): keep the two in step.
CREATE OR REPLACE FUNCTION flow_claim(q text, want integer, aging double precision, lease double precision,
                                      worker text)
RETURNS TABLE (id bigint, queue_name text, task text, payload jsonb, payload_version integer,
               attempt_count integer, max_attempts integer, lock_token uuid, fence bigint,
               idempotency_key text, correlation_id text, checkpoint_step text, checkpoint_data jsonb,
               lease_expires_at timestamptz, wait_seconds double precision, priority smallint,
               trace_context text, flow_key text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    ctl record;
    room integer;
    picked bigint[] := '{}';
    pick_keys text[] := '{}';
    skip text[] := '{}';
    aged_before timestamptz := now() - make_interval(secs => aging);
    budget integer;
    cur text;
    lvl integer := 32767;
    pos text;
    nk text;
    nat timestamptz;
    round_start text;
    round_progress boolean;
    wrapped boolean;
    cap integer;
    w double precision;
    d double precision;
    has_row boolean;
    share double precision;
    held boolean;
    hold boolean := false;
    key_rows boolean;
    hid bigint;
    hrate text;
    hunits integer;
    todo refcursor;
    round_takers integer;
    round_banked boolean;
    last_taker text;
    solo text;
    quota integer;
    took integer;
    drained boolean;
    jid bigint;
    jkey text;
    jrate text;
    junits integer;
    blocked_until timestamptz;
    retry_at timestamptz := NULL;
BEGIN
    INSERT INTO queues (name) VALUES (q) ON CONFLICT DO NOTHING;
    SELECT s.paused, s.max_running, s.per_key_running, s.flow_cursor INTO ctl
    FROM queues s WHERE s.name = q FOR UPDATE;
    IF ctl.paused THEN
        RETURN;
    END IF;
    room := want;
    IF ctl.max_running IS NOT NULL THEN
        room := least(room, ctl.max_running - (SELECT count(*)::int FROM jobs r
                                               WHERE r.status = 'running' AND r.queue_name = q));
    END IF;
    IF room <= 0 THEN
        RETURN;
    END IF;
    budget := 8 * room + 64;
    cur := ctl.flow_cursor;
    key_rows := EXISTS (SELECT 1 FROM flow_keys f WHERE f.queue_name = q);

    -- The aged lane: of the oldest jobs ready longer than `aging`, one per key, the keys in ring
    -- order from the cursor (the oldest key would otherwise win every claim a bucket allows one).
    FOR jid, jkey, jrate, junits IN
        SELECT c.id, c.k, c.rate_limit, c.rate_units FROM (
            SELECT a.id, coalesce(a.flow_key, '') AS k, a.rate_limit, a.rate_units, a.available_at FROM jobs a
            WHERE a.status = 'pending' AND a.queue_name = q AND a.available_at <= aged_before
            ORDER BY a.available_at, a.id LIMIT 4 * room) c
        ORDER BY cur IS NOT NULL AND c.k <= cur, c.k, c.available_at, c.id
    LOOP
        EXIT WHEN cardinality(picked) >= room;
        CONTINUE WHEN jkey = ANY(skip) OR jkey = ANY(pick_keys);
        IF jkey <> '' THEN
            SELECT f.running INTO cap FROM flow_keys f WHERE f.queue_name = q AND f.flow_key = jkey;
            cap := coalesce(cap, ctl.per_key_running);
            IF cap IS NOT NULL AND (SELECT count(*) FROM jobs r WHERE r.status = 'running'
                                    AND r.queue_name = q AND r.flow_key = jkey) >= cap THEN
                skip := skip || jkey;
                CONTINUE;
            END IF;
        END IF;
        PERFORM 1 FROM jobs l WHERE l.id = jid AND l.status = 'pending' FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        IF jrate IS NOT NULL THEN
            blocked_until := rate_take(jrate, junits, nullif(jkey, ''));
            IF blocked_until IS NOT NULL THEN
                skip := skip || jkey;
                retry_at := least(retry_at, blocked_until);
                hold := true;
                CONTINUE;
            END IF;
        END IF;
        picked := picked || jid;
        pick_keys := pick_keys || jkey;
        cur := jkey;
    END LOOP;

    -- The priority levels, highest first; in each, the keys round-robin from the cursor.
    LOOP
        EXIT WHEN cardinality(picked) >= room OR budget <= 0;
        SELECT greatest(
            (SELECT max(p.priority) FROM jobs p WHERE p.status = 'pending' AND p.queue_name = q
               AND p.flow_key IS NULL AND p.available_at <= now() AND p.priority < lvl),
            (SELECT max(p.priority) FROM jobs p WHERE p.status = 'pending' AND p.queue_name = q
               AND p.flow_key IS NOT NULL AND p.available_at <= now() AND p.priority < lvl))
        INTO lvl;
        EXIT WHEN lvl IS NULL;
        -- A round visits every position of the ring once, starting after round_start; the
        -- ring is '' (the jobs without a key), then every key with jobs at this level in order.
        round_start := cur;
        pos := cur;
        wrapped := false;
        round_progress := false;
        round_takers := 0;
        round_banked := false;
        solo := NULL;
        LOOP
            EXIT WHEN cardinality(picked) >= room OR budget <= 0;
            IF pos IS NULL THEN
                nk := '';
            ELSE
                budget := budget - 1;
                -- The next key's first job at this level: the key, and (locked) its head job.
                SELECT k.flow_key, k.available_at, k.id, k.rate_limit, k.rate_units
                INTO nk, nat, hid, hrate, hunits FROM jobs k
                WHERE k.status = 'pending' AND k.queue_name = q AND k.priority = lvl
                  AND k.flow_key IS NOT NULL AND k.flow_key > pos AND k.id <> ALL(picked)
                ORDER BY k.flow_key, k.available_at, k.id LIMIT 1 FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    nk := NULL;
                END IF;
            END IF;
            IF nk IS NULL THEN  -- past the last key: back to the start of the ring
                IF wrapped OR round_start IS NULL THEN  -- a whole round has passed
                    EXIT WHEN NOT round_progress;
                    -- One key alone took jobs (and none banked a share): it is alone at this level
                    -- for the rest of the claim, so its next visit takes the rest of the room.
                    solo := CASE WHEN round_takers = 1 AND NOT round_banked THEN last_taker END;
                    round_progress := false;
                    round_takers := 0;
                    round_banked := false;
                    round_start := pos;
                END IF;
                wrapped := true;
                pos := NULL;
                CONTINUE;
            END IF;
            IF wrapped AND round_start IS NOT NULL AND nk > round_start THEN  -- a whole round
                EXIT WHEN NOT round_progress;
                solo := CASE WHEN round_takers = 1 AND NOT round_banked THEN last_taker END;
                round_progress := false;
                round_takers := 0;
                round_banked := false;
                round_start := pos;
                wrapped := false;
            END IF;
            pos := nk;
            -- A key stepped over (skipped, nothing ready) moves the cursor past it, unless a key
            -- its bucket held back came earlier in this claim: that one keeps its turn.
            IF nk = ANY(skip) OR (nk <> '' AND nat > now()) THEN
                IF NOT hold THEN
                    cur := pos;
                END IF;
                CONTINUE;
            END IF;
            cap := NULL; w := 1; d := 0; has_row := false;
            IF nk <> '' AND key_rows THEN
                SELECT f.running, f.weight, f.deficit, true INTO cap, w, d, has_row
                FROM flow_keys f WHERE f.queue_name = q AND f.flow_key = nk;
                IF NOT FOUND THEN
                    cap := NULL; w := 1; d := 0; has_row := false;
                END IF;
            END IF;
            IF nk <> '' THEN
                cap := coalesce(cap, ctl.per_key_running);
            END IF;
            IF cap IS NOT NULL THEN
                cap := cap - (SELECT count(*)::int FROM jobs r WHERE r.status = 'running'
                              AND r.queue_name = q AND r.flow_key = nk)
                           - (SELECT count(*)::int FROM unnest(pick_keys) u WHERE u = nk);
                IF cap <= 0 THEN  -- at its running limit
                    skip := skip || nk;
                    IF NOT hold THEN
                        cur := pos;
                    END IF;
                    CONTINUE;
                END IF;
            END IF;
            -- The visit's share: its weight plus the fraction carried over, or what is left of a
            -- visit that the room of an earlier claim (or a bucket) cut short (a deficit of 1 or
            -- more is only ever that).
            share := CASE WHEN nk = solo THEN room - cardinality(picked) WHEN d >= 1 THEN d ELSE w + d END;
            quota := least(floor(share)::int, coalesce(cap, room), room - cardinality(picked));
            took := 0;
            drained := false;
            held := false;
            IF floor(share) < 1 THEN
                -- A weight below 1 banks its share; that is progress only if a job is there to take.
                IF nk = '' THEN
                    drained := NOT EXISTS (SELECT 1 FROM jobs j WHERE j.status = 'pending' AND j.queue_name = q
                        AND j.flow_key IS NULL AND j.priority = lvl AND j.available_at <= now()
                        AND j.id <> ALL(picked));
                ELSE
                    drained := NOT EXISTS (SELECT 1 FROM jobs j WHERE j.status = 'pending' AND j.queue_name = q
                        AND j.priority = lvl AND j.flow_key = nk AND j.available_at <= now()
                        AND j.id <> ALL(picked));
                END IF;
                IF NOT drained THEN
                    round_progress := true;
                    round_banked := true;
                    IF NOT hold THEN
                        cur := pos;
                    END IF;
                END IF;
            END IF;
            -- The key's next `quota` jobs, first in, first out, in one probe: for a visit of one
            -- job, the head job the ring's probe locked, no probe at all.
            IF nk = '' THEN
                OPEN todo FOR
                    SELECT j.id, j.rate_limit, j.rate_units FROM jobs j
                    WHERE j.status = 'pending' AND j.queue_name = q AND j.flow_key IS NULL
                      AND j.priority = lvl AND j.available_at <= now() AND j.id <> ALL(picked)
                    ORDER BY j.priority DESC, j.available_at, j.id LIMIT quota FOR UPDATE SKIP LOCKED;
            ELSIF quota > 1 THEN
                OPEN todo FOR
                    SELECT j.id, j.rate_limit, j.rate_units FROM jobs j
                    WHERE j.status = 'pending' AND j.queue_name = q AND j.priority = lvl
                      AND j.flow_key = nk AND j.available_at <= now() AND j.id <> ALL(picked)
                    ORDER BY j.flow_key, j.available_at, j.id LIMIT quota FOR UPDATE SKIP LOCKED;
            ELSE
                OPEN todo FOR SELECT hid, hrate, hunits WHERE quota = 1;
            END IF;
            LOOP
                FETCH todo INTO jid, jrate, junits;
                EXIT WHEN NOT FOUND;
                IF jrate IS NOT NULL THEN
                    blocked_until := rate_take(jrate, junits, nullif(nk, ''));
                    IF blocked_until IS NOT NULL THEN
                        skip := skip || nk;
                        retry_at := least(retry_at, blocked_until);
                        held := true;
                        hold := true;
                        EXIT;
                    END IF;
                END IF;
                picked := picked || jid;
                pick_keys := pick_keys || nk;
                took := took + 1;
            END LOOP;
            CLOSE todo;
            drained := drained OR (floor(share) >= 1 AND NOT held AND took < quota);
            IF took > 0 THEN
                round_progress := true;
                round_takers := round_takers + 1;
                last_taker := nk;
            END IF;
            -- The cursor moves past the key when its visit is over; a visit cut short by the room
            -- or by its bucket leaves the cursor before the key, so the next claim finishes it.
            -- (After a key its bucket held back, nothing moves the cursor: that key keeps its turn.)
            IF floor(share) >= 1 AND NOT held AND (drained OR took >= least(floor(share), coalesce(cap, floor(share)))) THEN
                IF NOT hold THEN
                    cur := pos;
                END IF;
            ELSIF floor(share) < 1 AND drained AND NOT hold THEN
                cur := pos;
            END IF;
            IF has_row AND (w <> 1 OR d <> 0) THEN
                d := CASE WHEN drained OR nk = solo THEN 0
                          WHEN floor(share) < 1 THEN share                       -- banked
                          WHEN held OR took < least(floor(share), coalesce(cap, floor(share))) THEN share - took
                          ELSE (share - took) - floor(share - took) END;         -- the fraction carries over
                UPDATE flow_keys f SET deficit = d WHERE f.queue_name = q AND f.flow_key = nk;
            END IF;
        END LOOP;
    END LOOP;
    -- A claim that spent its whole budget leaves the cursor where it stopped, held keys or not,
    -- so the next one gets further instead of probing the same keys again.
    IF budget <= 0 AND pos IS NOT NULL THEN
        cur := pos;
    END IF;

    IF cur IS DISTINCT FROM ctl.flow_cursor THEN
        UPDATE queues s SET flow_cursor = cur WHERE s.name = q;
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE jobs j
        SET status = 'running', started_at = now(), last_heartbeat_at = now(),
            lease_expires_at = now() + make_interval(secs => lease),
            locked_by = worker, lock_token = gen_random_uuid(),
            fence = nextval('job_fence_seq'),
            attempt_count = j.attempt_count + 1, updated_at = now()
        WHERE j.id = ANY(picked)
        RETURNING j.id, j.queue_name, j.task, j.payload, j.payload_version, j.attempt_count,
                  j.max_attempts, j.lock_token, j.fence, j.idempotency_key, j.correlation_id,
                  j.checkpoint_step, j.checkpoint_data, j.lease_expires_at,
                  greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds,
                  j.priority, j.trace_context, j.flow_key
    )
    SELECT c.* FROM claimed c JOIN unnest(picked) WITH ORDINALITY AS u(id, n) ON u.id = c.id ORDER BY u.n;
    IF retry_at IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer, NULL::integer,
                            NULL::integer, NULL::uuid, NULL::bigint, NULL::text, NULL::text, NULL::text,
                            NULL::jsonb, retry_at, greatest(extract(epoch FROM retry_at - now())::float8, 0),
                            NULL::smallint, NULL::text, NULL::text;
    END IF;
END
$fn$;

-- Workflows (DAGs of jobs) and batches with callbacks (issue 39, docs/workflows.md).
-- A step is a job with workflows.id in jobs.workflow_id; its name, flags and output are in
-- workflow_steps, and each edge (the step waits for dep) is a row of workflow_deps. A step with
-- deps is enqueued `waiting`; it becomes `pending` (released) in the transaction of the write
-- that settles its last dep, by the triggers below, so every path that completes, dead-letters,
-- cancels or replays a job (worker acks, the reaper, the SQS API, job control, the DLQ) releases
-- or cancels its dependents. That write is a compare-and-set on the attempt's token: a stale
-- attempt's completion changes no row, so it settles nothing, and a dep settles once (an edge is
-- settled only while unsettled). No counter is kept: a step is released when none of its edges
-- still blocks it, read after its row is locked, so two deps settled at once by two transactions
-- release it once (the second reads the first's edge after the first commits).
CREATE TABLE workflows (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    cancelled_at timestamptz
);
CREATE INDEX workflows_created_idx ON workflows (created_at, id);
CREATE TABLE workflow_steps (
    job_id           bigint      PRIMARY KEY,
    workflow_id      bigint      NOT NULL REFERENCES workflows ON DELETE CASCADE,
    name             text        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 200),
    ignore_failed    boolean     NOT NULL DEFAULT false,
    ignore_cancelled boolean     NOT NULL DEFAULT false,
    output           jsonb,
    cancel_reason    text,
    UNIQUE (workflow_id, name)
) WITH (fillfactor = 70);
-- `settled`: NULL while the dep has not ended, else how it ended (completed, failed, cancelled).
-- A settled edge blocks no more when it completed or its step ignores that ending; otherwise it
-- dooms the step (cancelled, reason dependency_failed or dependency_cancelled).
CREATE TABLE workflow_deps (
    job_id   bigint NOT NULL REFERENCES workflow_steps ON DELETE CASCADE,
    dep_id   bigint NOT NULL REFERENCES workflow_steps ON DELETE CASCADE,
    settled  text   CHECK (settled IN ('completed', 'failed', 'cancelled')),
    PRIMARY KEY (job_id, dep_id),
    CHECK (job_id <> dep_id)
) WITH (fillfactor = 70);
-- The release finds a settled job's dependents here: one probe per settled job.
CREATE INDEX workflow_deps_dep_idx ON workflow_deps (dep_id);
-- ... and judges each dependent by probes, never by reading all its edges (a fan-in of 10,000
-- deps would read 10,000 edges at each of its 10,000 completions): does an unsettled edge
-- remain, did a dep end failed or cancelled.
CREATE INDEX workflow_deps_open_idx ON workflow_deps (job_id) WHERE settled IS NULL;
CREATE INDEX workflow_deps_ended_idx ON workflow_deps (job_id, settled) WHERE settled IN ('failed', 'cancelled');
CREATE TABLE batches (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    callbacks      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    callback_queue text        NOT NULL DEFAULT 'default',
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- Each callback's job, once enqueued ({"completed": id, ...}): written under the batch's row
    -- lock, so each is enqueued once.
    fired          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    finished_at    timestamptz
);
CREATE INDEX jobs_workflow_idx ON jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;
-- Waiting steps per queue (`tenure stats`, the exporter's tenure_queue_jobs{state="waiting"}).
CREATE INDEX jobs_waiting_idx ON jobs (queue_name) WHERE status = 'waiting';
CREATE INDEX job_history_workflow_idx ON job_history (workflow_id, id) WHERE workflow_id IS NOT NULL;
CREATE INDEX jobs_batch_idx ON jobs (batch_id, status) WHERE batch_id IS NOT NULL;
CREATE INDEX job_history_batch_idx ON job_history (batch_id) WHERE batch_id IS NOT NULL;
-- A batch's unfinished jobs: "is any left?" is one probe, not a count of the batch.
CREATE INDEX jobs_batch_live_idx ON jobs (batch_id)
    WHERE batch_id IS NOT NULL AND status IN ('waiting', 'pending', 'running');

-- Settle the edges out of `deps` (jobs that ended as `outcome`), then release or cancel each
-- dependent still waiting. Dependents that other edges still block are locked in id order before
-- they are judged, and judged by a later statement (a fresh snapshot): a dependent two
-- transactions settle at once is judged again by the second, after the first commits.
-- Cancelling a dependent fires workflow_job_changed for it in turn, so a failure cancels
-- everything downstream that does not ignore it.
CREATE OR REPLACE FUNCTION workflow_settle(deps bigint[], outcome text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    waiting bigint[];
    contested bigint[];
    woken integer;
BEGIN
    WITH settled AS (
        UPDATE workflow_deps d SET settled = outcome
        WHERE d.dep_id = ANY (deps) AND d.settled IS NULL
        RETURNING d.job_id
    ), children AS (
        SELECT DISTINCT job_id FROM settled
    )
    SELECT array_agg(c.job_id),
           array_agg(c.job_id) FILTER (WHERE EXISTS (
               SELECT 1 FROM workflow_deps o
               WHERE o.job_id = c.job_id AND o.settled IS NULL AND NOT o.dep_id = ANY (deps)))
    INTO waiting, contested FROM children c;
    IF waiting IS NULL THEN
        RETURN;
    END IF;
    -- A dependent with another edge still open (as this statement saw it) may have that edge
    -- settled by a concurrent transaction: lock it, so the judgement below (a later statement,
    -- a fresh snapshot) sees that edge once the other commits. One without such an edge cannot
    -- be settled by anyone else (an edge settles once), so a fan-out's dependents are judged
    -- without a lock each.
    IF contested IS NOT NULL THEN
        PERFORM 1 FROM unnest(contested) AS w(id) JOIN jobs j ON j.id = w.id
        WHERE j.status = 'waiting' ORDER BY j.id FOR UPDATE OF j;
    END IF;
    WITH judged AS (
        SELECT s.job_id, s.workflow_id, s.name,
               EXISTS (SELECT 1 FROM workflow_deps d WHERE d.job_id = s.job_id AND d.settled IS NULL) AS blocked,
               e.failed AND NOT s.ignore_failed AS dep_failed,
               e.cancelled AND NOT s.ignore_cancelled AS dep_cancelled
        FROM unnest(waiting) AS w(id) JOIN workflow_steps s ON s.job_id = w.id
        CROSS JOIN LATERAL (
            SELECT coalesce(bool_or(d.settled = 'failed'), false) AS failed,
                   coalesce(bool_or(d.settled = 'cancelled'), false) AS cancelled
            FROM workflow_deps d WHERE d.job_id = s.job_id AND d.settled IN ('failed', 'cancelled')) e
    ), moved AS (
        UPDATE jobs j
        SET status = CASE WHEN g.dep_failed OR g.dep_cancelled THEN 'cancelled' ELSE 'pending' END::job_status,
            available_at = CASE WHEN g.dep_failed OR g.dep_cancelled THEN j.available_at ELSE now() END,
            cancelled_at = CASE WHEN g.dep_failed OR g.dep_cancelled THEN now() END,
            updated_at = now()
        FROM judged g
        WHERE j.id = g.job_id AND j.status = 'waiting' AND (NOT g.blocked OR g.dep_failed OR g.dep_cancelled)
        RETURNING j.id, j.queue_name, j.status, g.workflow_id, g.name,
                  CASE WHEN g.dep_failed THEN 'dependency_failed'
                       WHEN g.dep_cancelled THEN 'dependency_cancelled' END AS reason
    ), marked AS (
        UPDATE workflow_steps s
        SET cancel_reason = m.reason
        FROM moved m WHERE s.job_id = m.id AND m.reason IS NOT NULL
    ), events AS (
        INSERT INTO job_events (job_id, queue_name, event, reason, detail)
        SELECT id, queue_name, CASE WHEN reason IS NULL THEN 'released' ELSE 'cancelled' END, reason,
               jsonb_build_object('workflow_id', workflow_id, 'step', name, 'deps_settled_as', outcome)
        FROM moved
    )
    SELECT count(*) INTO woken FROM (SELECT pg_notify(current_schema() || '_jobs', q)
                                     FROM (SELECT DISTINCT queue_name AS q FROM moved WHERE reason IS NULL) r) n;
END
$fn$;

-- Undo the settling of the edges out of `deps` (dead or cancelled jobs put back to pending by a
-- replay or a retry), and put back to `waiting` each dependent that their ending cancelled
-- (cancel_reason dependency_*) and that no other ended dep dooms; their own dependents follow
-- through workflow_job_changed. A dependent already released (it ignored the ending) keeps running.
CREATE OR REPLACE FUNCTION workflow_resume(deps bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    doomed bigint[];
BEGIN
    WITH unsettled AS (
        UPDATE workflow_deps d SET settled = NULL
        FROM workflow_steps s, jobs j
        WHERE d.dep_id = ANY (deps) AND d.settled IN ('failed', 'cancelled')
          AND s.job_id = d.job_id AND j.id = d.job_id
          AND (j.status = 'waiting' OR (j.status = 'cancelled' AND s.cancel_reason IS NOT NULL))
        RETURNING d.job_id
    )
    SELECT array_agg(DISTINCT job_id) INTO doomed FROM unsettled;
    IF doomed IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM unnest(doomed) AS w(id) JOIN jobs j ON j.id = w.id ORDER BY j.id FOR UPDATE OF j;
    WITH back AS (
        UPDATE jobs j SET status = 'waiting', cancelled_at = NULL, updated_at = now()
        FROM unnest(doomed) AS w(id) JOIN workflow_steps s ON s.job_id = w.id
        WHERE j.id = w.id AND j.status = 'cancelled' AND s.cancel_reason IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM workflow_deps d WHERE d.job_id = j.id
                          AND ((d.settled = 'failed' AND NOT s.ignore_failed)
                               OR (d.settled = 'cancelled' AND NOT s.ignore_cancelled)))
        RETURNING j.id, j.queue_name, s.workflow_id, s.name
    ), marked AS (
        UPDATE workflow_steps s SET cancel_reason = NULL FROM back b WHERE s.job_id = b.id
    )
    INSERT INTO job_events (job_id, queue_name, event, reason, detail)
    SELECT id, queue_name, 'resumed', 'dependency_replayed',
           jsonb_build_object('workflow_id', workflow_id, 'step', name)
    FROM back;
END
$fn$;

-- Enqueue the callbacks of the batches `ids` that are due and not enqueued yet: `exhausted` when
-- `outcome` is failed (a job of the batch was dead-lettered), `finished` when none of its jobs is
-- waiting, pending or running, `completed` when moreover all of them completed. Each batch's row
-- is locked (id order) before it is read again by a later statement, so the last two jobs of a
-- batch ending in two transactions at once fire its callbacks once, in the second. A callback is
-- a plain job of the batch's callback queue whose payload is the batch's summary.
CREATE OR REPLACE FUNCTION batch_settle(ids bigint[], outcome text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    b record;
    due text[];
    kind text;
    summary jsonb;
    job bigint;
BEGIN
    FOR b IN SELECT * FROM batches WHERE id = ANY (ids) ORDER BY id FOR UPDATE LOOP
        due := '{}';
        IF outcome = 'failed' AND b.callbacks ? 'exhausted' AND NOT b.fired ? 'exhausted' THEN
            due := array_append(due, 'exhausted');
        END IF;
        IF b.finished_at IS NULL AND NOT EXISTS (
                SELECT 1 FROM jobs j WHERE j.batch_id = b.id AND j.status IN ('waiting', 'pending', 'running')) THEN
            UPDATE batches SET finished_at = now() WHERE id = b.id;
            IF b.callbacks ? 'finished' AND NOT b.fired ? 'finished' THEN
                due := array_append(due, 'finished');
            END IF;
            IF b.callbacks ? 'completed' AND NOT b.fired ? 'completed' AND NOT EXISTS (
                    SELECT 1 FROM jobs j WHERE j.batch_id = b.id AND j.status IN ('failed', 'cancelled')) THEN
                due := array_append(due, 'completed');
            END IF;
        END IF;
        IF cardinality(due) = 0 THEN
            CONTINUE;
        END IF;
        SELECT jsonb_build_object(
                   'batch_id', b.id,
                   'total', count(*),
                   'completed', count(*) FILTER (WHERE a.status = 'completed'),
                   'failed', count(*) FILTER (WHERE a.status = 'failed'),
                   'cancelled', count(*) FILTER (WHERE a.status = 'cancelled'),
                   'unfinished', count(*) FILTER (WHERE a.status IN ('waiting', 'pending', 'running')))
        INTO summary
        FROM (SELECT status FROM jobs WHERE batch_id = b.id
              UNION ALL SELECT status FROM job_history WHERE batch_id = b.id) a;
        FOREACH kind IN ARRAY due LOOP
            INSERT INTO jobs (queue_name, task, payload)
            VALUES (b.callback_queue, b.callbacks ->> kind, summary || jsonb_build_object('event', kind))
            RETURNING id INTO job;
            INSERT INTO job_events (job_id, queue_name, event, reason, detail)
            VALUES (job, b.callback_queue, 'batch_callback_enqueued', kind,
                    jsonb_build_object('batch_id', b.id) || summary);
            UPDATE batches SET fired = fired || jsonb_build_object(kind, job) WHERE id = b.id;
        END LOOP;
        PERFORM pg_notify(current_schema() || '_jobs', b.callback_queue);
    END LOOP;
END
$fn$;

-- Completed jobs arrive in job_history (the statement that completes them moves them there):
-- settle their workflow edges and their batches. A statement-level trigger, so an ack of many
-- jobs settles them in one pass, with no work at all for jobs of neither.
CREATE OR REPLACE FUNCTION workflow_jobs_completed() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    steps bigint[];
    groups bigint[];
BEGIN
    SELECT array_agg(id) FILTER (WHERE workflow_id IS NOT NULL),
           array_agg(DISTINCT batch_id) FILTER (WHERE batch_id IS NOT NULL)
    INTO steps, groups FROM completed_rows;
    IF steps IS NOT NULL THEN
        PERFORM workflow_settle(steps, 'completed');
    END IF;
    IF groups IS NOT NULL THEN
        PERFORM batch_settle(groups, 'completed');
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER job_history_completed_settle AFTER INSERT ON job_history
    REFERENCING NEW TABLE AS completed_rows FOR EACH STATEMENT EXECUTE FUNCTION workflow_jobs_completed();

-- A step or batch job that ends in `jobs` (dead-lettered, cancelled) or comes back from there (a
-- replay or a retry): settle, or unsettle, its edges and its batch. Only rows of a workflow or a
-- batch whose status changed reach the function (the trigger's WHEN), so other writes pay nothing.
CREATE OR REPLACE FUNCTION workflow_job_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    reopened_edges integer;
BEGIN
    IF NEW.status IN ('failed', 'cancelled') THEN
        IF NEW.workflow_id IS NOT NULL THEN
            PERFORM workflow_settle(ARRAY[NEW.id], NEW.status::text);
        END IF;
        IF NEW.batch_id IS NOT NULL THEN
            PERFORM batch_settle(ARRAY[NEW.batch_id], NEW.status::text);
        END IF;
    ELSIF OLD.status IN ('failed', 'cancelled') THEN
        IF NEW.workflow_id IS NOT NULL THEN
            -- A step put back (a replay, a retry) waits again for deps that have not completed:
            -- it never runs before them, even when it was cancelled because one of them failed.
            WITH reopened AS (
                UPDATE workflow_deps d SET settled = NULL
                FROM workflow_steps s
                WHERE d.job_id = NEW.id AND s.job_id = NEW.id
                  AND ((d.settled = 'failed' AND NOT s.ignore_failed)
                       OR (d.settled = 'cancelled' AND NOT s.ignore_cancelled))
                RETURNING d.job_id
            )
            SELECT count(*) INTO reopened_edges FROM reopened;
            IF NEW.status = 'pending' AND (reopened_edges > 0 OR EXISTS (
                    SELECT 1 FROM workflow_deps d WHERE d.job_id = NEW.id AND d.settled IS NULL)) THEN
                UPDATE jobs SET status = 'waiting', updated_at = now() WHERE id = NEW.id;
                UPDATE workflow_steps SET cancel_reason = NULL WHERE job_id = NEW.id;
            END IF;
            PERFORM workflow_resume(ARRAY[NEW.id]);
        END IF;
        -- The batch is unfinished again; a callback already enqueued is not enqueued twice.
        UPDATE batches SET finished_at = NULL WHERE id = NEW.batch_id AND finished_at IS NOT NULL;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_workflow_changed AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN ((NEW.workflow_id IS NOT NULL OR NEW.batch_id IS NOT NULL) AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('failed', 'cancelled') OR OLD.status IN ('failed', 'cancelled')))
    EXECUTE FUNCTION workflow_job_changed();
