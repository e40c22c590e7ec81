-- 0018_workflows_batches: workflows (DAGs of jobs) and batches with callbacks (issue 39). The
-- columns rewrite nothing (no defaults); all_jobs is recreated for them.
ALTER TABLE jobs ADD COLUMN workflow_id bigint;
ALTER TABLE jobs ADD COLUMN batch_id bigint;
ALTER TABLE job_history ADD COLUMN workflow_id bigint;
ALTER TABLE job_history ADD COLUMN batch_id bigint;
CREATE OR REPLACE VIEW all_jobs AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM job_history;

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
