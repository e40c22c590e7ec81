-- Statement-CPU variant (python -m bench.statement_cpu bench/variants/ui_payloads_without_0008.sql):
-- as ui_payloads.sql, without the five job browser indexes of migration 0008: the "before".

-- name: setup_drop_0008
-- drop the job browser's indexes (queue, task and finished status in id order, BRIN on created_at, GIN on payload)
DROP INDEX {schema}.jobs_queue_id_idx, {schema}.jobs_task_id_idx, {schema}.jobs_finished_idx,
    {schema}.jobs_created_idx, {schema}.jobs_payload_idx;

-- name: setup_payloads
-- give the backlog realistic two-key payloads
UPDATE {schema}.jobs SET payload = jsonb_build_object('invoice_id', id, 'customer', 'cust-' || (id % 1000));

-- name: setup_vacuum
-- clean the update's dead versions before measuring
VACUUM (ANALYZE) {schema}.jobs;
