-- 0007: the job browser (`tenure ui`, issue 24): a job's effects are read by job id.
CREATE INDEX IF NOT EXISTS job_executions_job_idx ON job_executions (job_id);
