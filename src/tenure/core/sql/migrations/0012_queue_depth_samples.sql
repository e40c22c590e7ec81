-- 0012_queue_depth_samples: the depth of every queue once a minute (issue 36 item 5, the job
-- browser's charts). A reaper cycle (`tenure reaper`, or a worker's in-process reaper) writes one
-- row per queue per minute: ready (runnable), blocked (held back by a flow limit) and running, as
-- `tenure stats` counts them; several reapers write the same minute once (the primary key).
-- Rows older than 8 days are deleted by the same statement. Depth history exists only from when a
-- reaper of this version started sampling. Throughput, failures and waits need no table: they are
-- read from job_history and job_events.
CREATE TABLE IF NOT EXISTS queue_depth_samples (
    sampled_at  timestamptz NOT NULL,
    queue_name  text        NOT NULL,
    ready       bigint      NOT NULL,
    blocked     bigint      NOT NULL,
    running     bigint      NOT NULL,
    PRIMARY KEY (sampled_at, queue_name)
);
