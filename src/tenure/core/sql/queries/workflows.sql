-- Workflows and batches (issue 39, docs/workflows.md): enqueue a DAG of steps or a batch with
-- callbacks, a running step's output and the steps it adds, and their listings. The release of
-- waiting steps, the cascade of failures and the callbacks are in schema.sql (triggers): every
-- path that ends a job runs them, in its own transaction.
-- Run by src/tenure/core/repository/workflows.py (WorkflowQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: workflow_enqueue
-- Insert a workflow and all its steps and edges in one statement; steps with deps are `waiting`, the others `pending`; returns the workflow's id and its steps' job ids in order.
-- Job ids are drawn first (nextval, in the materialised `spec`), so edges can name them before
-- the rows exist; the edges `dep_from[i]` waits for `dep_to[i]` are 1-based step positions.
WITH wf AS (
    INSERT INTO {schema}.workflows (name) VALUES (%(name)s) RETURNING id
), spec AS MATERIALIZED (
    SELECT s.*, nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id
    FROM unnest(%(names)s::text[], %(tasks)s::text[], %(payloads)s::jsonb[], %(queues)s::text[],
                %(max_attempts)s::int[], %(priorities)s::smallint[], %(payload_versions)s::int[],
                %(ignore_failed)s::bool[], %(ignore_cancelled)s::bool[], %(waiting)s::bool[])
         WITH ORDINALITY AS s(name, task, payload, queue, max_attempts, priority, payload_version,
                              ignore_failed, ignore_cancelled, waiting, n)
), ins AS (
    INSERT INTO {schema}.jobs (id, queue_name, task, payload, max_attempts, priority, payload_version, status,
                               workflow_id)
    OVERRIDING SYSTEM VALUE
    SELECT spec.id, spec.queue, spec.task, spec.payload, spec.max_attempts, spec.priority, spec.payload_version,
           CASE WHEN spec.waiting THEN 'waiting' ELSE 'pending' END::{schema}.job_status, wf.id
    FROM spec, wf
    RETURNING id, queue_name, status
), steps AS (
    INSERT INTO {schema}.workflow_steps (job_id, workflow_id, name, ignore_failed, ignore_cancelled)
    SELECT spec.id, wf.id, spec.name, spec.ignore_failed, spec.ignore_cancelled FROM spec, wf
), edges AS (
    INSERT INTO {schema}.workflow_deps (job_id, dep_id)
    SELECT a.id, b.id FROM unnest(%(dep_from)s::int[], %(dep_to)s::int[]) AS e(f, t)
    JOIN spec a ON a.n = e.f JOIN spec b ON b.n = e.t
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM ins WHERE status = 'pending') r
)
SELECT wf.id, (SELECT array_agg(id ORDER BY n) FROM spec) AS step_ids
FROM wf WHERE (SELECT count(*) FROM notified) >= 0 AND (SELECT count(*) FROM ins) >= 0;

-- name: workflow_step_deps_lock
-- Before a running step adds a step: lock (share) its own row, if `token` still holds it, and its new step's deps still in `jobs`, so none of them ends until the add commits; returns the adder's workflow.
-- A dep ending meanwhile is waited for here; the add's next statement (a fresh snapshot) then
-- sees how it ended, and a dep ending later sees the new edge when it settles.
WITH adder AS (
    SELECT j.workflow_id FROM {schema}.jobs j
    WHERE j.id = %(id)s AND j.status = 'running' AND j.lock_token = %(token)s
    FOR SHARE
), deps AS (
    SELECT j.id FROM {schema}.jobs j WHERE j.id = ANY (%(deps)s::bigint[]) ORDER BY j.id FOR SHARE
)
SELECT workflow_id, (SELECT count(*) FROM deps)::int AS locked FROM adder;

-- name: workflow_step_add
-- Add one step to workflow `workflow_id` waiting for `deps` (steps of that workflow): pending when they all completed already, cancelled when one ended otherwise and is not ignored, else waiting; returns the step's id and status (no row: a dep is not a step of that workflow).
WITH dep AS (
    SELECT s.job_id, a.status::text AS status FROM {schema}.workflow_steps s
    JOIN {schema}.all_jobs a ON a.id = s.job_id
    WHERE s.workflow_id = %(workflow_id)s AND s.job_id = ANY (%(deps)s::bigint[])
), judged AS (
    SELECT count(*) = cardinality(%(deps)s::bigint[]) AS known,
           bool_or(status NOT IN ('completed', 'failed', 'cancelled')) AS blocked,
           bool_or(status = 'failed' AND NOT %(ignore_failed)s) AS dep_failed,
           bool_or(status = 'cancelled' AND NOT %(ignore_cancelled)s) AS dep_cancelled
    FROM dep
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, priority, payload_version, status,
                               workflow_id, cancelled_at)
    SELECT %(queue)s, %(task)s, %(payload)s::jsonb, %(max_attempts)s, %(priority)s, %(payload_version)s,
           CASE WHEN g.dep_failed OR g.dep_cancelled THEN 'cancelled'
                WHEN g.blocked THEN 'waiting' ELSE 'pending' END::{schema}.job_status,
           %(workflow_id)s, CASE WHEN g.dep_failed OR g.dep_cancelled THEN now() END
    FROM judged g WHERE g.known
    RETURNING id, queue_name, status
), step AS (
    INSERT INTO {schema}.workflow_steps (job_id, workflow_id, name, ignore_failed, ignore_cancelled, cancel_reason)
    SELECT ins.id, %(workflow_id)s, %(name)s, %(ignore_failed)s, %(ignore_cancelled)s,
           CASE WHEN g.dep_failed THEN 'dependency_failed' WHEN g.dep_cancelled THEN 'dependency_cancelled' END
    FROM ins, judged g
), events AS (
    -- A step whose deps all ended already is released (or cancelled) by its add, as by a settle.
    INSERT INTO {schema}.job_events (job_id, queue_name, event, reason, detail)
    SELECT ins.id, ins.queue_name, CASE WHEN ins.status = 'pending' THEN 'released' ELSE 'cancelled' END,
           CASE WHEN g.dep_failed THEN 'dependency_failed' WHEN g.dep_cancelled THEN 'dependency_cancelled' END,
           jsonb_build_object('workflow_id', %(workflow_id)s::bigint, 'step', %(name)s::text)
    FROM ins, judged g
    WHERE cardinality(%(deps)s::bigint[]) > 0 AND ins.status IN ('pending', 'cancelled')
), edges AS (
    INSERT INTO {schema}.workflow_deps (job_id, dep_id, settled)
    SELECT ins.id, dep.job_id, CASE WHEN dep.status IN ('completed', 'failed', 'cancelled') THEN dep.status END
    FROM ins, dep
), notified AS (
    SELECT pg_notify(%(channel)s, queue_name) FROM ins WHERE status = 'pending'
)
SELECT id, status::text AS status FROM ins WHERE (SELECT count(*) FROM notified) >= 0;

-- name: workflow_step_output_set
-- Store a running step's output (CAS on the attempt's token: a stale attempt's output is refused); returns the step's id.
UPDATE {schema}.workflow_steps s SET output = %(output)s::jsonb
FROM {schema}.jobs j
WHERE s.job_id = j.id AND j.id = %(id)s AND j.status = 'running' AND j.lock_token = %(token)s
RETURNING s.job_id;

-- name: workflow_step_get
-- One job's place in its workflow: the workflow's id and name and the step's name (no row: not a step).
SELECT s.workflow_id, w.name AS workflow_name, s.name
FROM {schema}.workflow_steps s JOIN {schema}.workflows w ON w.id = s.workflow_id
WHERE s.job_id = %(id)s;

-- name: workflow_dep_outputs
-- The outputs of a step's deps, by step name (NULL: the dep stored none).
SELECT s.name, s.output FROM {schema}.workflow_deps d JOIN {schema}.workflow_steps s ON s.job_id = d.dep_id
WHERE d.job_id = %(id)s ORDER BY s.name;

-- name: workflow_list
-- Workflows, newest first, with their steps counted by status (wherever the steps live).
SELECT w.id, w.name, w.created_at, w.cancelled_at, c.steps, c.by_status,
       (c.unfinished = 0) AS finished
FROM {schema}.workflows w
CROSS JOIN LATERAL (
    SELECT coalesce(sum(n), 0)::int AS steps,
           coalesce(jsonb_object_agg(st, n) FILTER (WHERE st IS NOT NULL), '{}'::jsonb) AS by_status,
           coalesce(sum(n) FILTER (WHERE st IN ('waiting', 'pending', 'running')), 0)::int AS unfinished
    FROM (SELECT a.status::text AS st, count(*)::int AS n FROM {schema}.all_jobs a
          WHERE a.workflow_id = w.id GROUP BY a.status) g
) c
WHERE (%(before_id)s::bigint IS NULL OR w.id < %(before_id)s::bigint)
ORDER BY w.id DESC LIMIT %(limit)s;

-- name: workflow_get
-- One workflow's header (no row: no such workflow).
SELECT id, name, created_at, cancelled_at FROM {schema}.workflows WHERE id = %(id)s;

-- name: workflow_steps_list
-- One workflow's steps in id order: name, job status, task, queue, deps (job ids), output (of the first `outputs` steps only, if given), release and cancel reason.
SELECT s.job_id AS id, s.name, a.status::text AS status, a.task, a.queue_name,
       CASE WHEN %(outputs)s::int IS NULL OR s.n <= %(outputs)s::int THEN s.output END AS output,
       (SELECT max(e.created_at) FROM {schema}.job_events e
        WHERE e.job_id = s.job_id AND e.event = 'released') AS released_at,
       s.cancel_reason, s.ignore_failed, s.ignore_cancelled, a.attempt_count, a.started_at, a.completed_at,
       coalesce((SELECT array_agg(d.dep_id ORDER BY d.dep_id) FROM {schema}.workflow_deps d
                 WHERE d.job_id = s.job_id), '{}') AS deps
FROM (SELECT w.*, row_number() OVER (ORDER BY w.job_id) AS n FROM {schema}.workflow_steps w
      WHERE w.workflow_id = %(id)s) s
JOIN {schema}.all_jobs a ON a.id = s.job_id
ORDER BY s.job_id;

-- name: workflow_cancel
-- Mark a workflow cancelled and return its unfinished steps (waiting, pending, running), which the caller cancels as jobs.
WITH marked AS (
    UPDATE {schema}.workflows SET cancelled_at = coalesce(cancelled_at, now()) WHERE id = %(id)s RETURNING id
)
SELECT j.id FROM {schema}.jobs j JOIN marked m ON j.workflow_id = m.id
WHERE j.status IN ('waiting', 'pending', 'running') ORDER BY j.id;

-- name: batch_enqueue
-- Insert a batch and all its jobs in one statement; returns the batch's id.
WITH b AS (
    INSERT INTO {schema}.batches (callbacks, callback_queue) VALUES (%(callbacks)s::jsonb, %(callback_queue)s)
    RETURNING id
), ins AS (
    INSERT INTO {schema}.jobs (queue_name, task, payload, max_attempts, priority, payload_version, batch_id)
    SELECT s.queue, s.task, s.payload, s.max_attempts, s.priority, s.payload_version, b.id
    FROM unnest(%(tasks)s::text[], %(payloads)s::jsonb[], %(queues)s::text[], %(max_attempts)s::int[],
                %(priorities)s::smallint[], %(payload_versions)s::int[])
         AS s(task, payload, queue, max_attempts, priority, payload_version), b
    RETURNING queue_name
), notified AS (
    SELECT pg_notify(%(channel)s, q) FROM (SELECT DISTINCT queue_name AS q FROM ins) r
)
SELECT b.id, (SELECT count(*) FROM ins)::int AS jobs FROM b WHERE (SELECT count(*) FROM notified) >= 0;

-- name: batch_get
-- One batch: its callbacks, the callback jobs enqueued so far, and its jobs counted by status.
SELECT b.id, b.callbacks, b.callback_queue, b.created_at, b.finished_at, b.fired,
       (SELECT coalesce(jsonb_object_agg(st, n), '{}'::jsonb)
        FROM (SELECT a.status::text AS st, count(*)::int AS n FROM {schema}.all_jobs a
              WHERE a.batch_id = b.id GROUP BY a.status) g) AS by_status
FROM {schema}.batches b WHERE b.id = %(id)s;

-- name: workflow_prune
-- Delete up to `batch` workflows created more than `older_than` s ago none of whose steps is left in jobs or job_history (retention pruned them all); their steps' names, edges and outputs go with them; returns how many.
WITH gone AS (
    DELETE FROM {schema}.workflows w
    WHERE w.id IN (SELECT o.id FROM {schema}.workflows o
                   WHERE o.created_at < now() - make_interval(secs => %(older_than)s)
                     AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs a WHERE a.workflow_id = o.id)
                   ORDER BY o.id LIMIT %(batch)s)
    RETURNING 1
)
SELECT count(*)::int AS deleted FROM gone;

-- name: batch_prune
-- Delete up to `batch` batches created more than `older_than` s ago none of whose jobs is left in jobs or job_history; returns how many.
WITH gone AS (
    DELETE FROM {schema}.batches b
    WHERE b.id IN (SELECT o.id FROM {schema}.batches o
                   WHERE o.created_at < now() - make_interval(secs => %(older_than)s)
                     AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs a WHERE a.batch_id = o.id)
                   ORDER BY o.id LIMIT %(batch)s)
    RETURNING 1
)
SELECT count(*)::int AS deleted FROM gone;
