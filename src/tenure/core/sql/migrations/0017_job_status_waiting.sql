-- 0017_job_status_waiting: the `waiting` status of a workflow step whose deps have not all
-- completed (issue 39, docs/workflows.md). Alone in its migration: a value added to an enum
-- cannot be used in the transaction that adds it, and 0018 uses it.
ALTER TYPE job_status ADD VALUE IF NOT EXISTS 'waiting';
