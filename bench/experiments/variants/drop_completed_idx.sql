-- Statement-CPU variant (python -m bench.experiments.statement_cpu bench/experiments/variants/drop_completed_idx.sql):
-- tenure's own claim and completion without jobs_completed_idx, i.e. with one index entry fewer
-- per completed row. Measures what that index costs the completion.

-- name: setup_drop_completed_idx
-- drop the (queue_name, completed_at) index of completed rows
DROP INDEX {schema}.jobs_completed_idx;
