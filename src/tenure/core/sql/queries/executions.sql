-- The execution store (R14): one row per effect's idempotency key, claimed, succeeded,
-- failed or in doubt.
-- Run by src/tenure/core/repository/executions.py (ExecutionQueries).
--
-- Format (every file in this directory, loaded together by tenure.core.queries): each block starts
-- with `-- name: <entity>_<verb>` and a one-line description; names are unique across the files.
-- `{schema}` becomes the quoted schema name, `{channel}` the wake-up channel, `{x_filter}` the
-- fragment x_filter. Every time comparison uses the database clock (now()), never the worker's (R6).

-- name: execution_list_for_job
-- The execution-store records (effects) written by one job's attempts, oldest first.
SELECT idempotency_key, status, lock_token, attempt_count, lease_until, claimed_at, result_ref, last_error_code,
       created_at, updated_at, succeeded_at
FROM {schema}.job_executions WHERE job_id = %(id)s ORDER BY created_at, idempotency_key;

-- name: execution_claim
-- Atomically claim an idempotency key (R14): insert, or take over only a non-succeeded key whose lease has expired; a key left in flight (or given up in doubt) is taken over in doubt.
WITH claimed AS (
    INSERT INTO {schema}.job_executions AS e (idempotency_key, status, job_id, lock_token, lease_until)
    VALUES (%(key)s, 'processing', %(job_id)s, %(token)s, now() + make_interval(secs => %(lease)s))
    ON CONFLICT (idempotency_key) DO UPDATE
    SET status = 'processing', job_id = excluded.job_id, lock_token = excluded.lock_token,
        lease_until = excluded.lease_until, attempt_count = e.attempt_count + 1,
        claimed_at = now(), updated_at = now(),
        -- The previous holder recorded neither success nor failure: its body may have run.
        last_error_code = CASE WHEN (e.status = 'processing' AND e.lock_token IS DISTINCT FROM excluded.lock_token)
                                    OR e.last_error_code = 'in_doubt' THEN 'in_doubt' END
    WHERE e.status <> 'succeeded'
      AND (e.status IN ('retrying', 'failed') OR e.lease_until IS NULL OR e.lease_until < now()
           OR e.lock_token = excluded.lock_token)
    RETURNING e.attempt_count, e.last_error_code
)
SELECT CASE WHEN last_error_code = 'in_doubt' THEN 'in_doubt' ELSE 'claimed' END AS outcome,
       NULL::text AS result_ref, attempt_count FROM claimed
UNION ALL
SELECT CASE WHEN e.status = 'succeeded' THEN 'already_succeeded' ELSE 'leased_by_other_worker' END,
       e.result_ref, e.attempt_count
FROM {schema}.job_executions e
WHERE e.idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM claimed);

-- name: execution_succeed
-- Record the effect's result; only the holder of the key's current claim may (CAS on the token).
UPDATE {schema}.job_executions
SET status = 'succeeded', result_ref = %(result_ref)s, lease_until = NULL, succeeded_at = now(),
    updated_at = now(), last_error_code = NULL
WHERE idempotency_key = %(key)s AND status = 'processing' AND lock_token = %(token)s
RETURNING idempotency_key;

-- name: execution_fail
-- Record a failed effect attempt (retrying or failed); only the current holder may.
UPDATE {schema}.job_executions
SET status = %(status)s, last_error_code = %(error_code)s, lease_until = NULL, updated_at = now()
WHERE idempotency_key = %(key)s AND status = 'processing' AND lock_token = %(token)s
RETURNING idempotency_key;

-- name: execution_recheck
-- After a reconnect: the execution-store rows of effects whose success this worker saw acknowledged (a failover may have lost them).
SELECT k.key, k.token, e.status, (e.lock_token = k.token) AS token_current
FROM unnest(%(keys)s::text[], %(tokens)s::uuid[]) AS k(key, token)
LEFT JOIN {schema}.job_executions e ON e.idempotency_key = k.key;

-- name: execution_mark_in_doubt
-- An acknowledged success missing after a failover: the key becomes in doubt (the next claim reconciles, never runs it as new); a key held by another live claim is left alone.
INSERT INTO {schema}.job_executions AS e (idempotency_key, status, job_id, lock_token, lease_until, last_error_code)
VALUES (%(key)s, 'retrying', %(job_id)s, %(token)s, NULL, 'in_doubt')
ON CONFLICT (idempotency_key) DO UPDATE
SET status = 'retrying', lease_until = NULL, last_error_code = 'in_doubt', updated_at = now()
WHERE e.status IN ('retrying', 'failed') OR (e.status = 'processing' AND e.lock_token = %(token)s)
RETURNING idempotency_key;

-- name: execution_get
-- One execution record by idempotency key.
SELECT * FROM {schema}.job_executions WHERE idempotency_key = %(key)s;
