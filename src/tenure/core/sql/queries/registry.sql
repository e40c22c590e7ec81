-- The worker registry (R9): a fresh id per process, its heartbeat (touch), its stop, the
-- listing and pruning of stopped workers.
-- Run by src/tenure/core/repository/registry.py (RegistryQueries); the heartbeat touches too.
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: worker_register
-- Add this process to the worker registry (R9).
INSERT INTO {schema}.workers (id, host, pid, queues, concurrency, heartbeat_seconds, version, lease_seconds)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(heartbeat_seconds)s, %(version)s,
        %(lease_seconds)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL;

-- name: worker_touch
-- Mark a worker as seen now, with its abandoned handler threads (when it holds no jobs, the heartbeat statement is skipped).
UPDATE {schema}.workers SET last_seen_at = now(), abandoned_threads = %(abandoned)s::int WHERE id = %(id)s;

-- name: worker_stop
-- Mark a worker as cleanly stopped.
UPDATE {schema}.workers SET stopped_at = now(), last_seen_at = now() WHERE id = %(id)s;

-- name: worker_list
-- The registry with each worker's liveness judged by the DB clock.
SELECT id, host, pid, queues, concurrency, heartbeat_seconds, lease_seconds, version, started_at, last_seen_at,
       stopped_at, abandoned_threads,
       extract(epoch FROM now() - last_seen_at)::float8 AS silent_seconds,
       (stopped_at IS NULL AND last_seen_at > now() - make_interval(secs => 3 * heartbeat_seconds)) AS alive
FROM {schema}.workers
WHERE stopped_at IS NULL OR stopped_at > now() - interval '1 day'
ORDER BY started_at;

-- name: worker_prune
-- Forget workers that stopped or went silent long ago (their jobs are recovered by lease expiry, never by this row).
DELETE FROM {schema}.workers
WHERE coalesce(stopped_at, last_seen_at) < now() - make_interval(secs => %(older_than)s);
