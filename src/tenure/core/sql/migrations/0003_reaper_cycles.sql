-- 0003_reaper_cycles: every reaper cycle (CronJob `--once`, loop, or a worker's in-process
-- reaper) is counted in one row, so the exporter can serve the reaper's liveness and last
-- cycle even when the reaper is a short-lived pod with no metrics port.
CREATE TABLE reaper_cycles (
    id                boolean     PRIMARY KEY DEFAULT true CHECK (id),
    cycles            bigint      NOT NULL DEFAULT 0,
    last_finished_at  timestamptz NOT NULL DEFAULT now(),
    last_seconds      double precision NOT NULL DEFAULT 0,
    last_reaped       integer     NOT NULL DEFAULT 0,
    last_reaper_id    text
);
