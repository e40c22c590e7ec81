-- 0008_ui_indexes: the job browser's filters (`tenure ui`, issue 24) at millions of jobs. A page
-- is the newest matching jobs (ORDER BY id DESC LIMIT n); without these, a filter on a rare or
-- long-gone queue or task, an empty time window or a payload value walks most of the primary
-- key. Their cost on enqueue, claim and completion is measured in docs/performance.md ("The job
-- browser at 5M jobs"). On a big existing table each CREATE INDEX takes a while (and blocks
-- writes to jobs meanwhile): run `tenure migrate` in a quiet moment.

-- Queue and task filters: the matching ids in order, whatever the queue's share or age.
CREATE INDEX jobs_queue_id_idx ON jobs (queue_name, id);
CREATE INDEX jobs_task_id_idx ON jobs (task, id);
-- Status filters of finished jobs, in id order: without it a page of failed jobs first walks the
-- whole ready backlog (the newest ids). Partial, so it costs one entry when a job finishes and
-- none on enqueue or claim; running jobs have their own indexes, pending ones are the newest.
CREATE INDEX jobs_finished_idx ON jobs (status, id) WHERE status IN ('completed', 'failed', 'cancelled');
-- "Created since": created_at is set once and grows with id; a BRIN index is a few pages.
CREATE INDEX jobs_created_idx ON jobs USING brin (created_at);
-- Payload containment (`payload @> '{"invoice_id": 42}'`).
CREATE INDEX jobs_payload_idx ON jobs USING gin (payload jsonb_path_ops);
