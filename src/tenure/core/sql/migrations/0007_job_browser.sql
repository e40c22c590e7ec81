-- 0007: the job browser (`tenure ui`, issue 24). A job's effects are read by job id.
CREATE INDEX IF NOT EXISTS job_executions_job_idx ON job_executions (job_id);
-- The worker registry records each worker's abandoned handler threads (their leases were lost
-- while a sync handler kept running), shown on the job browser's workers page.
ALTER TABLE workers ADD COLUMN IF NOT EXISTS abandoned_threads integer NOT NULL DEFAULT 0;
