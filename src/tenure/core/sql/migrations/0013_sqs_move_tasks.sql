-- 0013_sqs_move_tasks: the message move tasks of `tenure sqs` (StartMessageMoveTask) live here
-- rather than in the process that started them (issue 36 item 3), so every replica lists and
-- cancels them, and a task whose runner stopped (restart, crash) is resumed by a replica: its
-- runner heartbeats on every batch, and a running task whose heartbeat is older than
-- `tenure sqs`'s adoption bound is taken over by the next replica that sweeps.
CREATE TABLE sqs_move_tasks (
    handle           text        PRIMARY KEY,
    source_queue     text        NOT NULL,
    source_arn       text        NOT NULL,
    target_queue     text        NOT NULL,
    destination_arn  text,
    rate             integer     CHECK (rate IS NULL OR rate >= 1),
    total            bigint      NOT NULL,
    moved            bigint      NOT NULL DEFAULT 0,
    status           text        NOT NULL DEFAULT 'RUNNING'
                     CHECK (status IN ('RUNNING', 'COMPLETED', 'CANCELLED', 'FAILED')),
    failure          text,
    runner           text        NOT NULL,
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
-- One running task per source queue, as SQS allows.
CREATE UNIQUE INDEX sqs_move_tasks_running_idx ON sqs_move_tasks (source_queue) WHERE status = 'RUNNING';
CREATE INDEX sqs_move_tasks_source_idx ON sqs_move_tasks (source_arn, started_at DESC);
