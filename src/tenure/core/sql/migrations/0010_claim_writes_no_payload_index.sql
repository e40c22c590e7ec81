-- 0010_claim_writes_no_payload_index: a claim no longer writes the payload's GIN entries (issue 40).
-- A claim turns a pending row into a running one; the status is in index predicates, so the
-- update is never HOT and the new row version got an entry in every full index of `jobs`,
-- the payload GIN index among them: every key of the payload, again, for each claim (6-8 µs of
-- the database's CPU per job, docs/performance.md "Acknowledgements"). The index now leaves
-- running rows out; the job browser's payload filter reads running rows (at most the workers'
-- concurrency) through their own index (job_browse_filter says how).
-- On a big existing table the CREATE INDEX takes a while and blocks writes to jobs meanwhile:
-- run `tenure migrate` in a quiet moment.
DROP INDEX IF EXISTS jobs_payload_idx;
CREATE INDEX jobs_payload_idx ON jobs USING gin (payload jsonb_path_ops) WHERE status <> 'running';
