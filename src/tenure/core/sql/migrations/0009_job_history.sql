-- 0009_job_history: finished jobs leave the hot table (issue 23, docs/architecture.md "Where finished
-- jobs live"). A completing statement moves its job from `jobs` into `job_history`, partitioned
-- by day of completed_at (UTC); retention drops whole partitions. Dead-lettered (failed) and
-- cancelled jobs stay in `jobs`: a replay or a retry brings them back to pending, and few of
-- them exist next to the completed ones. Idempotency keys are remembered in `job_keys` from
-- enqueue until their job is pruned, so a key keeps deduplicating after its job moved.
-- Nothing here rewrites `jobs` or holds a long lock: completed rows already in `jobs` are moved
-- in batches afterwards (`tenure history move`, and every reaper cycle a batch), and reads see
-- both tables meanwhile through `all_jobs`. A column added to `jobs` later must be added to
-- `job_history` in the same migration (the view and the moves copy rows column by column).

CREATE TABLE IF NOT EXISTS job_history (
    LIKE jobs INCLUDING DEFAULTS,
    CONSTRAINT job_history_completed CHECK (status = 'completed' AND completed_at IS NOT NULL)
) PARTITION BY RANGE (completed_at);
-- Day partitions (job_history_pYYYYMMDD) are created ahead of need by job_history_ensure;
-- a completion on a day without one lands here, and the next ensure moves it to its day.
CREATE TABLE IF NOT EXISTS job_history_default PARTITION OF job_history DEFAULT;
CREATE INDEX IF NOT EXISTS job_history_id_idx ON job_history (id);
CREATE INDEX IF NOT EXISTS job_history_queue_id_idx ON job_history (queue_name, id);
CREATE INDEX IF NOT EXISTS job_history_task_id_idx ON job_history (task, id);
CREATE INDEX IF NOT EXISTS job_history_queue_completed_idx ON job_history (queue_name, completed_at);
CREATE INDEX IF NOT EXISTS job_history_key_idx ON job_history (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS job_history_created_idx ON job_history USING brin (created_at);
CREATE INDEX IF NOT EXISTS job_history_payload_idx ON job_history USING gin (payload jsonb_path_ops);

-- Every job, wherever it lives: the readers' table (job pages, listings, the browser, counts).
-- The CHECK above lets the planner skip job_history for any status but completed.
CREATE OR REPLACE VIEW all_jobs AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM job_history;

-- A completion now deletes its row from jobs: the cascade of sqs_receipts' foreign key would cost
-- every completion a trigger (8 µs per job measured, bench/experiments/ui_index_cost.py --variant). The
-- statements that delete jobs delete their receipts themselves.
ALTER TABLE sqs_receipts DROP CONSTRAINT IF EXISTS sqs_receipts_job_id_fkey;

-- Enqueue-time deduplication (R13) across both tables: a key is inserted here when its job is
-- enqueued (and when a job enqueued by an older tenure moves to history), and deleted when its
-- job is pruned or purged.
CREATE TABLE IF NOT EXISTS job_keys (
    idempotency_key  text PRIMARY KEY,
    created_at       timestamptz NOT NULL DEFAULT now()
);
INSERT INTO job_keys (idempotency_key, created_at)
SELECT idempotency_key, created_at FROM jobs WHERE idempotency_key IS NOT NULL
ON CONFLICT DO NOTHING;

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
