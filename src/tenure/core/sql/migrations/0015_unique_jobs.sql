-- 0015_unique_jobs: unique jobs (issue 39, item 3). A job enqueued with a unique declaration
-- carries its key (jobs.unique_key: sha256 hex of the task and the chosen payload fields, then
-- '@' and the start of its time bucket with a period) and the states the key covers
-- (jobs.unique_states, always pending and running, never completed). A partial unique index
-- holds at most one job per key among jobs in their own covered states, so concurrent and bulk
-- enqueues conflict in the index, never by a look-up (docs/unique.md). Jobs without a key have
-- no entry; the new columns rewrite nothing (no defaults).
ALTER TABLE jobs ADD COLUMN unique_key text;
ALTER TABLE jobs ADD COLUMN unique_states job_status[];
ALTER TABLE jobs ADD CONSTRAINT jobs_unique_states_valid CHECK (
    unique_key IS NULL
    OR (unique_states @> '{pending,running}'::job_status[] AND NOT 'completed'::job_status = ANY (unique_states)
        AND octet_length(unique_key) BETWEEN 64 AND 100));
ALTER TABLE job_history ADD COLUMN unique_key text;
ALTER TABLE job_history ADD COLUMN unique_states job_status[];
CREATE OR REPLACE VIEW all_jobs AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM job_history;

CREATE UNIQUE INDEX jobs_unique_key_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status = ANY (unique_states);
