-- 0016_series_rollup: a rollup of the job browser's charts (issue 36 item 5), so that the 7-day
-- and 24-hour windows read a few thousand rows instead of every job completed in them. Once a
-- minute, a reaper cycle rolls up each closed period (ended 5 minutes ago or more) not rolled up
-- yet: hours (seconds = 3600) of the last 8 days, for the 7-day window's hourly buckets, and
-- quarter hours (900) of the last 25 hours, for the 24-hour window's. One statement per period:
-- the period's row in queue_series_rollups is inserted ON CONFLICT DO NOTHING, and its figures are
-- written only by the statement that inserted it, so several reapers roll up a period once. Older
-- periods are deleted (with their figures, by the foreign keys). A period without a row is read
-- from the jobs, as before.
CREATE TABLE IF NOT EXISTS queue_series_rollups (
    seconds     integer     NOT NULL CHECK (seconds IN (900, 3600)),
    period      timestamptz NOT NULL,
    rolled_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seconds, period)
);

-- Per queue and period: the jobs completed in it (by completed_at), the failed attempts and the
-- dead letters of its audit events (by created_at). A queue with none of these has no row.
CREATE TABLE IF NOT EXISTS queue_series_periods (
    seconds          integer     NOT NULL,
    period           timestamptz NOT NULL,
    queue_name       text        NOT NULL,
    completed        bigint      NOT NULL,
    failed_attempts  bigint      NOT NULL,
    dead_lettered    bigint      NOT NULL,
    PRIMARY KEY (seconds, period, queue_name),
    FOREIGN KEY (seconds, period) REFERENCES queue_series_rollups ON DELETE CASCADE
);

-- Per queue, period of completion and period of start: a histogram of the wait from ready to
-- start (started_at - available_at) of the jobs completed in `period` that started in
-- `started_period`, as the pairs (wait_buckets[i], jobs[i]) of its non-empty buckets. Bucket 0
-- holds waits under 1 ms; bucket b (1 to 179) holds [10^((b-1)/20), 10^(b/20)) ms, 20 per
-- decade; bucket 180 holds everything from 10^(179/20) ms (about 10.3 days) up. Keyed by the
-- period of completion, so a job that completes after the period it started in was rolled up is
-- still counted.
CREATE TABLE IF NOT EXISTS queue_wait_periods (
    seconds         integer     NOT NULL,
    period          timestamptz NOT NULL,
    queue_name      text        NOT NULL,
    started_period  timestamptz NOT NULL,
    wait_buckets    smallint[]  NOT NULL,
    jobs            integer[]   NOT NULL,
    PRIMARY KEY (seconds, period, queue_name, started_period),
    FOREIGN KEY (seconds, period) REFERENCES queue_series_rollups ON DELETE CASCADE
);
