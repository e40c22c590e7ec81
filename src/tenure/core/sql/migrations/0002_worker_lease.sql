-- 0002_worker_lease: the registry records each worker's lease, so `tenure doctor` can compare
-- it with observed runtimes even when no job is running. NULL for workers of older versions.
ALTER TABLE workers ADD COLUMN lease_seconds double precision;
