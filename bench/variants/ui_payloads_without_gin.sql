-- Statement-CPU variant (python -m bench.statement_cpu bench/variants/ui_payloads_without_gin.sql):
-- as ui_payloads.sql, without 0008's GIN index on payload (its btree and BRIN indexes kept):
-- what the payload filter's index alone costs.

-- name: setup_drop_gin
-- drop the payload containment index
DROP INDEX {schema}.jobs_payload_idx;

-- name: setup_payloads
-- give the backlog realistic two-key payloads
UPDATE {schema}.jobs SET payload = jsonb_build_object('invoice_id', id, 'customer', 'cust-' || (id % 1000));

-- name: setup_vacuum
-- clean the update's dead versions before measuring
VACUUM (ANALYZE) {schema}.jobs;
