-- Statement-CPU variant (python -m bench.statement_cpu bench/variants/ui_payloads.sql): tenure's
-- own claim and completion with every index of the schema, on jobs whose payloads look like the
-- job browser bench's ({"invoice_id": N, "customer": "cust-K"}) rather than `{}`, so the GIN
-- index of 0008 gets its real number of keys per row version. "After" of docs/performance.md,
-- "The job browser at 5M jobs"; ui_payloads_without_0008.sql is its "before".

-- name: setup_payloads
-- give the backlog realistic two-key payloads
UPDATE {schema}.jobs SET payload = jsonb_build_object('invoice_id', id, 'customer', 'cust-' || (id % 1000));

-- name: setup_vacuum
-- clean the update's dead versions (and the GIN pending list) before measuring
VACUUM (ANALYZE) {schema}.jobs;
