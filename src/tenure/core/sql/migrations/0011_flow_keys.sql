-- 0011_flow_keys: flow keys and per-key running limits (issue 38, items 1 and 2).
-- A job may carry a flow key (a tenant, an account: at most 200 bytes). A queue may cap the jobs
-- running per key (queues.per_key_running) and override the cap for one key (flow_keys.running);
-- the claim enforces both under the queue's claim gate (docs/flow.md). Every change of a limit
-- is recorded in flow_changes. Adding the columns rewrites nothing (NULL default); the new
-- indexes cover only keyed rows, so a database without keys pays for them nothing.
ALTER TABLE jobs ADD COLUMN flow_key text;
ALTER TABLE jobs ADD CONSTRAINT jobs_flow_key_length
    CHECK (flow_key IS NULL OR octet_length(flow_key) BETWEEN 1 AND 200) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_flow_key_length;
ALTER TABLE job_history ADD COLUMN flow_key text;
CREATE OR REPLACE VIEW all_jobs AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM job_history;

CREATE INDEX jobs_flow_running_idx ON jobs (queue_name, flow_key) WHERE status = 'running' AND flow_key IS NOT NULL;
CREATE INDEX jobs_flow_ready_idx ON jobs (queue_name, flow_key, available_at)
    WHERE status = 'pending' AND flow_key IS NOT NULL;
CREATE INDEX jobs_flow_key_id_idx ON jobs (flow_key, id) WHERE flow_key IS NOT NULL;
CREATE INDEX job_history_flow_key_id_idx ON job_history (flow_key, id) WHERE flow_key IS NOT NULL;

ALTER TABLE queues ADD COLUMN per_key_running integer CHECK (per_key_running IS NULL OR per_key_running >= 1);

CREATE TABLE flow_keys (
    queue_name  text        NOT NULL,
    flow_key    text        NOT NULL CHECK (octet_length(flow_key) BETWEEN 1 AND 200),
    running     integer     NOT NULL CHECK (running >= 1),
    updated_by  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, flow_key)
);

CREATE TABLE flow_changes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text        NOT NULL,
    queue_name  text        NOT NULL,
    flow_key    text,
    setting     text        NOT NULL,
    old_value   text,
    new_value   text
);
CREATE INDEX flow_changes_queue_idx ON flow_changes (queue_name, id);
