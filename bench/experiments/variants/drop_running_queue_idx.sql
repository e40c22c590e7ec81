-- Statement-CPU variant (python -m bench.experiments.statement_cpu bench/experiments/variants/drop_running_queue_idx.sql):
-- tenure's own claim and completion without jobs_running_queue_idx, i.e. with one index entry
-- fewer per claimed row. Measures what merging the two running-row indexes would save.

-- name: setup_drop_running_queue_idx
-- drop the (queue_name, started_at) index of running rows
DROP INDEX {schema}.jobs_running_queue_idx;
