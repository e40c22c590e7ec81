-- 0014_flow_rates_fairness: rate limits, back-pressure and weighted fairness (issue 38, items 3-5).
-- A job may name a rate limit (jobs.rate_limit, consuming jobs.rate_units tokens when claimed): a
-- token bucket in rate_limits/rate_buckets, shared across queues and tasks, one bucket per flow
-- key with per_key. A flow key may carry a weight (flow_keys.weight; its row's running limit is
-- now optional). A queue whose ready jobs carry keys or name a rate limit is claimed by
-- flow_claim, which walks its keys round-robin from queues.flow_cursor (docs/flow.md); a queue
-- without them claims as before. The new columns rewrite nothing (constant defaults), the new
-- indexes cover keyed or rate-limited rows only.
ALTER TABLE jobs ADD COLUMN rate_limit text;
ALTER TABLE jobs ADD COLUMN rate_units integer NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD CONSTRAINT jobs_rate_units_range CHECK (rate_units BETWEEN 1 AND 1000000);
ALTER TABLE job_history ADD COLUMN rate_limit text;
ALTER TABLE job_history ADD COLUMN rate_units integer CONSTRAINT jobs_rate_units_not_null NOT NULL DEFAULT 1;
CREATE OR REPLACE VIEW all_jobs AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM job_history;

-- Keyed ready jobs leave the priority index: flow_claim reads them by level and key from
-- jobs_flow_level_idx, and the index gives it the unkeyed jobs of a level without walking keyed ones.
-- job_claim and job_claim_gated never take a keyed job (a queue with one is claimed by flow_claim).
DROP INDEX jobs_ready_priority_idx;
CREATE INDEX jobs_ready_priority_idx ON jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending' AND flow_key IS NULL;
CREATE INDEX jobs_flow_level_idx ON jobs (queue_name, priority, flow_key, available_at, id)
    WHERE status = 'pending' AND flow_key IS NOT NULL;
CREATE INDEX jobs_rate_ready_idx ON jobs (queue_name, rate_limit, available_at)
    WHERE status = 'pending' AND rate_limit IS NOT NULL;

ALTER TABLE queues ADD COLUMN flow_cursor text;

ALTER TABLE flow_keys ALTER COLUMN running DROP NOT NULL;
ALTER TABLE flow_keys ADD COLUMN weight double precision NOT NULL DEFAULT 1;
ALTER TABLE flow_keys ADD COLUMN deficit double precision NOT NULL DEFAULT 0;
ALTER TABLE flow_keys ADD CONSTRAINT flow_keys_weight_range CHECK (weight > 0 AND weight <= 1000);
ALTER TABLE flow_keys ADD CONSTRAINT flow_keys_has_setting CHECK (running IS NOT NULL OR weight <> 1);

ALTER TABLE flow_changes ALTER COLUMN queue_name DROP NOT NULL;
ALTER TABLE flow_changes ADD COLUMN rate_limit text;
CREATE INDEX flow_changes_rate_limit_idx ON flow_changes (rate_limit, id) WHERE rate_limit IS NOT NULL;

CREATE TABLE rate_limits (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'),
    per_second  double precision NOT NULL CHECK (per_second > 0 AND per_second <= 1000000),
    burst       integer     NOT NULL CHECK (burst BETWEEN 1 AND 1000000),
    per_key     boolean     NOT NULL DEFAULT false,
    updated_by  text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rate_buckets (
    limit_name    text        NOT NULL REFERENCES rate_limits (name) ON DELETE CASCADE,
    flow_key      text        NOT NULL DEFAULT '',
    tokens        double precision NOT NULL,
    refilled_at   timestamptz NOT NULL DEFAULT now(),
    paused_until  timestamptz,
    PRIMARY KEY (limit_name, flow_key)
);


-- Take `units` tokens from the bucket of limit `lim` (the bucket of flow key `key` for a per-key
-- limit), refilled by the database clock: NULL when taken, else the earliest time the bucket can
-- have them (after a handler's pause, counted from its end; 10 ms on when another claim holds the
-- bucket). An unknown limit (deleted since the job was enqueued) limits nothing. The bucket's row
-- stays locked to the end of the transaction, so no two claims spend one token.
CREATE OR REPLACE FUNCTION rate_take(lim text, units integer, key text) RETURNS timestamptz
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    r record;
    b record;
    bucket text;
    have double precision;
    need integer;
BEGIN
    SELECT per_second, burst, per_key INTO r FROM rate_limits WHERE name = lim;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    bucket := CASE WHEN r.per_key THEN coalesce(key, '') ELSE '' END;
    -- Claims of different queues may need the same buckets in any order: never wait for one
    -- (a wait could deadlock); a bucket another claim holds is busy for a moment.
    SELECT tokens, refilled_at, paused_until INTO b
    FROM rate_buckets WHERE limit_name = lim AND flow_key = bucket FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Creating it must not wait either: an insert of the same bucket by a claim not yet
        -- committed would make this one wait, while that claim may wait for a queue this one holds.
        IF EXISTS (SELECT 1 FROM rate_buckets WHERE limit_name = lim AND flow_key = bucket)
           OR NOT pg_try_advisory_xact_lock(hashtextextended('tenure.rate:' || current_schema() || ':' || lim
                                                             || ':' || bucket, 0)) THEN
            RETURN now() + interval '10 milliseconds';
        END IF;
        INSERT INTO rate_buckets (limit_name, flow_key, tokens, refilled_at)
        VALUES (lim, bucket, r.burst, now()) ON CONFLICT DO NOTHING;
        SELECT tokens, refilled_at, paused_until INTO b
        FROM rate_buckets WHERE limit_name = lim AND flow_key = bucket FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN now() + interval '10 milliseconds';
        END IF;
    END IF;
    -- A job that needs more than the burst (lowered since it was enqueued) takes a full bucket.
    need := least(units, r.burst);
    IF b.paused_until > now() THEN
        RETURN b.paused_until + make_interval(secs => need / r.per_second);
    END IF;
    have := least(r.burst, b.tokens + r.per_second * greatest(0, extract(epoch FROM now() - b.refilled_at)));
    IF have < need THEN
        RETURN now() + make_interval(secs => (need - have) / r.per_second);
    END IF;
    -- Never back in time: a claim whose transaction began before the last one's must not count
    -- the refill between the two twice.
    UPDATE rate_buckets SET tokens = have - need, refilled_at = greatest(b.refilled_at, now()), paused_until = NULL
    WHERE limit_name = lim AND flow_key = bucket;
    RETURN NULL;
END
$fn$;

-- Claim up to `want` ready jobs of queue `q` fairly across its flow keys, within every limit: the
-- queue's max_running, each key's running limit and each job's rate limit (docs/flow.md). Returns
-- the claimed jobs in claim order, then, when a rate limit held a job back, one row whose id is
-- NULL and whose lease_expires_at is the earliest time a blocked bucket has its tokens again
-- (wait_seconds: how long from now).
-- Lanes, in order: jobs ready longer than `aging` seconds (of the oldest 4x the room, one per key,
-- the keys round-robin from the cursor), then each priority level with ready jobs, highest first.
-- In a level, keys are visited round-robin in key order from the queue's cursor (jobs without a
-- key are one key, first in the ring); a visit takes the key's weight in jobs (deficit
-- round-robin: a fraction carries over; a visit cut short by the room or a bucket is finished by
-- the next claim), FIFO within the key. A key at its running limit, or whose bucket is short, is
-- skipped for the rest of the call. At most 8x the room + 64 key probes per call; the cursor moves
-- past keys stepped over (except after a key its bucket held back, which keeps its turn), so the
-- next claim carries on from there. Locks the queue's control row (creating it) to the end of the
-- transaction, so the claims of a queue serialise and every count sees every claim; a caller
-- claiming several queues locks them first, in name order (queue_flow_lock).
-- The lease columns are set as in job_claim (claim.sql): keep the two in step.
CREATE OR REPLACE FUNCTION flow_claim(q text, want integer, aging double precision, lease double precision,
                                      worker text)
RETURNS TABLE (id bigint, queue_name text, task text, payload jsonb, payload_version integer,
               attempt_count integer, max_attempts integer, lock_token uuid, fence bigint,
               idempotency_key text, correlation_id text, checkpoint_step text, checkpoint_data jsonb,
               lease_expires_at timestamptz, wait_seconds double precision, priority smallint,
               trace_context text, flow_key text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    ctl record;
    room integer;
    picked bigint[] := '{}';
    pick_keys text[] := '{}';
    skip text[] := '{}';
    aged_before timestamptz := now() - make_interval(secs => aging);
    budget integer;
    cur text;
    lvl integer := 32767;
    pos text;
    nk text;
    nat timestamptz;
    round_start text;
    round_progress boolean;
    wrapped boolean;
    cap integer;
    w double precision;
    d double precision;
    has_row boolean;
    share double precision;
    held boolean;
    hold boolean := false;
    key_rows boolean;
    hid bigint;
    hrate text;
    hunits integer;
    todo refcursor;
    round_takers integer;
    round_banked boolean;
    last_taker text;
    solo text;
    quota integer;
    took integer;
    drained boolean;
    jid bigint;
    jkey text;
    jrate text;
    junits integer;
    blocked_until timestamptz;
    retry_at timestamptz := NULL;
BEGIN
    INSERT INTO queues (name) VALUES (q) ON CONFLICT DO NOTHING;
    SELECT s.paused, s.max_running, s.per_key_running, s.flow_cursor INTO ctl
    FROM queues s WHERE s.name = q FOR UPDATE;
    IF ctl.paused THEN
        RETURN;
    END IF;
    room := want;
    IF ctl.max_running IS NOT NULL THEN
        room := least(room, ctl.max_running - (SELECT count(*)::int FROM jobs r
                                               WHERE r.status = 'running' AND r.queue_name = q));
    END IF;
    IF room <= 0 THEN
        RETURN;
    END IF;
    budget := 8 * room + 64;
    cur := ctl.flow_cursor;
    key_rows := EXISTS (SELECT 1 FROM flow_keys f WHERE f.queue_name = q);

    -- The aged lane: of the oldest jobs ready longer than `aging`, one per key, the keys in ring
    -- order from the cursor (the oldest key would otherwise win every claim a bucket allows one).
    FOR jid, jkey, jrate, junits IN
        SELECT c.id, c.k, c.rate_limit, c.rate_units FROM (
            SELECT a.id, coalesce(a.flow_key, '') AS k, a.rate_limit, a.rate_units, a.available_at FROM jobs a
            WHERE a.status = 'pending' AND a.queue_name = q AND a.available_at <= aged_before
            ORDER BY a.available_at, a.id LIMIT 4 * room) c
        ORDER BY cur IS NOT NULL AND c.k <= cur, c.k, c.available_at, c.id
    LOOP
        EXIT WHEN cardinality(picked) >= room;
        CONTINUE WHEN jkey = ANY(skip) OR jkey = ANY(pick_keys);
        IF jkey <> '' THEN
            SELECT f.running INTO cap FROM flow_keys f WHERE f.queue_name = q AND f.flow_key = jkey;
            cap := coalesce(cap, ctl.per_key_running);
            IF cap IS NOT NULL AND (SELECT count(*) FROM jobs r WHERE r.status = 'running'
                                    AND r.queue_name = q AND r.flow_key = jkey) >= cap THEN
                skip := skip || jkey;
                CONTINUE;
            END IF;
        END IF;
        PERFORM 1 FROM jobs l WHERE l.id = jid AND l.status = 'pending' FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        IF jrate IS NOT NULL THEN
            blocked_until := rate_take(jrate, junits, nullif(jkey, ''));
            IF blocked_until IS NOT NULL THEN
                skip := skip || jkey;
                retry_at := least(retry_at, blocked_until);
                hold := true;
                CONTINUE;
            END IF;
        END IF;
        picked := picked || jid;
        pick_keys := pick_keys || jkey;
        cur := jkey;
    END LOOP;

    -- The priority levels, highest first; in each, the keys round-robin from the cursor.
    LOOP
        EXIT WHEN cardinality(picked) >= room OR budget <= 0;
        SELECT greatest(
            (SELECT max(p.priority) FROM jobs p WHERE p.status = 'pending' AND p.queue_name = q
               AND p.flow_key IS NULL AND p.available_at <= now() AND p.priority < lvl),
            (SELECT max(p.priority) FROM jobs p WHERE p.status = 'pending' AND p.queue_name = q
               AND p.flow_key IS NOT NULL AND p.available_at <= now() AND p.priority < lvl))
        INTO lvl;
        EXIT WHEN lvl IS NULL;
        -- A round visits every position of the ring once, starting after round_start; the
        -- ring is '' (the jobs without a key), then every key with jobs at this level in order.
        round_start := cur;
        pos := cur;
        wrapped := false;
        round_progress := false;
        round_takers := 0;
        round_banked := false;
        solo := NULL;
        LOOP
            EXIT WHEN cardinality(picked) >= room OR budget <= 0;
            IF pos IS NULL THEN
                nk := '';
            ELSE
                budget := budget - 1;
                -- The next key's first job at this level: the key, and (locked) its head job.
                SELECT k.flow_key, k.available_at, k.id, k.rate_limit, k.rate_units
                INTO nk, nat, hid, hrate, hunits FROM jobs k
                WHERE k.status = 'pending' AND k.queue_name = q AND k.priority = lvl
                  AND k.flow_key IS NOT NULL AND k.flow_key > pos AND k.id <> ALL(picked)
                ORDER BY k.flow_key, k.available_at, k.id LIMIT 1 FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    nk := NULL;
                END IF;
            END IF;
            IF nk IS NULL THEN  -- past the last key: back to the start of the ring
                IF wrapped OR round_start IS NULL THEN  -- a whole round has passed
                    EXIT WHEN NOT round_progress;
                    -- One key alone took jobs (and none banked a share): it is alone at this level
                    -- for the rest of the claim, so its next visit takes the rest of the room.
                    solo := CASE WHEN round_takers = 1 AND NOT round_banked THEN last_taker END;
                    round_progress := false;
                    round_takers := 0;
                    round_banked := false;
                    round_start := pos;
                END IF;
                wrapped := true;
                pos := NULL;
                CONTINUE;
            END IF;
            IF wrapped AND round_start IS NOT NULL AND nk > round_start THEN  -- a whole round
                EXIT WHEN NOT round_progress;
                solo := CASE WHEN round_takers = 1 AND NOT round_banked THEN last_taker END;
                round_progress := false;
                round_takers := 0;
                round_banked := false;
                round_start := pos;
                wrapped := false;
            END IF;
            pos := nk;
            -- A key stepped over (skipped, nothing ready) moves the cursor past it, unless a key
            -- its bucket held back came earlier in this claim: that one keeps its turn.
            IF nk = ANY(skip) OR (nk <> '' AND nat > now()) THEN
                IF NOT hold THEN
                    cur := pos;
                END IF;
                CONTINUE;
            END IF;
            cap := NULL; w := 1; d := 0; has_row := false;
            IF nk <> '' AND key_rows THEN
                SELECT f.running, f.weight, f.deficit, true INTO cap, w, d, has_row
                FROM flow_keys f WHERE f.queue_name = q AND f.flow_key = nk;
                IF NOT FOUND THEN
                    cap := NULL; w := 1; d := 0; has_row := false;
                END IF;
            END IF;
            IF nk <> '' THEN
                cap := coalesce(cap, ctl.per_key_running);
            END IF;
            IF cap IS NOT NULL THEN
                cap := cap - (SELECT count(*)::int FROM jobs r WHERE r.status = 'running'
                              AND r.queue_name = q AND r.flow_key = nk)
                           - (SELECT count(*)::int FROM unnest(pick_keys) u WHERE u = nk);
                IF cap <= 0 THEN  -- at its running limit
                    skip := skip || nk;
                    IF NOT hold THEN
                        cur := pos;
                    END IF;
                    CONTINUE;
                END IF;
            END IF;
            -- The visit's share: its weight plus the fraction carried over, or what is left of a
            -- visit that the room of an earlier claim (or a bucket) cut short (a deficit of 1 or
            -- more is only ever that).
            share := CASE WHEN nk = solo THEN room - cardinality(picked) WHEN d >= 1 THEN d ELSE w + d END;
            quota := least(floor(share)::int, coalesce(cap, room), room - cardinality(picked));
            took := 0;
            drained := false;
            held := false;
            IF floor(share) < 1 THEN
                -- A weight below 1 banks its share; that is progress only if a job is there to take.
                IF nk = '' THEN
                    drained := NOT EXISTS (SELECT 1 FROM jobs j WHERE j.status = 'pending' AND j.queue_name = q
                        AND j.flow_key IS NULL AND j.priority = lvl AND j.available_at <= now()
                        AND j.id <> ALL(picked));
                ELSE
                    drained := NOT EXISTS (SELECT 1 FROM jobs j WHERE j.status = 'pending' AND j.queue_name = q
                        AND j.priority = lvl AND j.flow_key = nk AND j.available_at <= now()
                        AND j.id <> ALL(picked));
                END IF;
                IF NOT drained THEN
                    round_progress := true;
                    round_banked := true;
                    IF NOT hold THEN
                        cur := pos;
                    END IF;
                END IF;
            END IF;
            -- The key's next `quota` jobs, first in, first out, in one probe: for a visit of one
            -- job, the head job the ring's probe locked, no probe at all.
            IF nk = '' THEN
                OPEN todo FOR
                    SELECT j.id, j.rate_limit, j.rate_units FROM jobs j
                    WHERE j.status = 'pending' AND j.queue_name = q AND j.flow_key IS NULL
                      AND j.priority = lvl AND j.available_at <= now() AND j.id <> ALL(picked)
                    ORDER BY j.priority DESC, j.available_at, j.id LIMIT quota FOR UPDATE SKIP LOCKED;
            ELSIF quota > 1 THEN
                OPEN todo FOR
                    SELECT j.id, j.rate_limit, j.rate_units FROM jobs j
                    WHERE j.status = 'pending' AND j.queue_name = q AND j.priority = lvl
                      AND j.flow_key = nk AND j.available_at <= now() AND j.id <> ALL(picked)
                    ORDER BY j.flow_key, j.available_at, j.id LIMIT quota FOR UPDATE SKIP LOCKED;
            ELSE
                OPEN todo FOR SELECT hid, hrate, hunits WHERE quota = 1;
            END IF;
            LOOP
                FETCH todo INTO jid, jrate, junits;
                EXIT WHEN NOT FOUND;
                IF jrate IS NOT NULL THEN
                    blocked_until := rate_take(jrate, junits, nullif(nk, ''));
                    IF blocked_until IS NOT NULL THEN
                        skip := skip || nk;
                        retry_at := least(retry_at, blocked_until);
                        held := true;
                        hold := true;
                        EXIT;
                    END IF;
                END IF;
                picked := picked || jid;
                pick_keys := pick_keys || nk;
                took := took + 1;
            END LOOP;
            CLOSE todo;
            drained := drained OR (floor(share) >= 1 AND NOT held AND took < quota);
            IF took > 0 THEN
                round_progress := true;
                round_takers := round_takers + 1;
                last_taker := nk;
            END IF;
            -- The cursor moves past the key when its visit is over; a visit cut short by the room
            -- or by its bucket leaves the cursor before the key, so the next claim finishes it.
            -- (After a key its bucket held back, nothing moves the cursor: that key keeps its turn.)
            IF floor(share) >= 1 AND NOT held AND (drained OR took >= least(floor(share), coalesce(cap, floor(share)))) THEN
                IF NOT hold THEN
                    cur := pos;
                END IF;
            ELSIF floor(share) < 1 AND drained AND NOT hold THEN
                cur := pos;
            END IF;
            IF has_row AND (w <> 1 OR d <> 0) THEN
                d := CASE WHEN drained OR nk = solo THEN 0
                          WHEN floor(share) < 1 THEN share                       -- banked
                          WHEN held OR took < least(floor(share), coalesce(cap, floor(share))) THEN share - took
                          ELSE (share - took) - floor(share - took) END;         -- the fraction carries over
                UPDATE flow_keys f SET deficit = d WHERE f.queue_name = q AND f.flow_key = nk;
            END IF;
        END LOOP;
    END LOOP;
    -- A claim that spent its whole budget leaves the cursor where it stopped, held keys or not,
    -- so the next one gets further instead of probing the same keys again.
    IF budget <= 0 AND pos IS NOT NULL THEN
        cur := pos;
    END IF;

    IF cur IS DISTINCT FROM ctl.flow_cursor THEN
        UPDATE queues s SET flow_cursor = cur WHERE s.name = q;
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE jobs j
        SET status = 'running', started_at = now(), last_heartbeat_at = now(),
            lease_expires_at = now() + make_interval(secs => lease),
            locked_by = worker, lock_token = gen_random_uuid(),
            fence = nextval('job_fence_seq'),
            attempt_count = j.attempt_count + 1, updated_at = now()
        WHERE j.id = ANY(picked)
        RETURNING j.id, j.queue_name, j.task, j.payload, j.payload_version, j.attempt_count,
                  j.max_attempts, j.lock_token, j.fence, j.idempotency_key, j.correlation_id,
                  j.checkpoint_step, j.checkpoint_data, j.lease_expires_at,
                  greatest(extract(epoch FROM now() - j.available_at)::float8, 0) AS wait_seconds,
                  j.priority, j.trace_context, j.flow_key
    )
    SELECT c.* FROM claimed c JOIN unnest(picked) WITH ORDINALITY AS u(id, n) ON u.id = c.id ORDER BY u.n;
    IF retry_at IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer, NULL::integer,
                            NULL::integer, NULL::uuid, NULL::bigint, NULL::text, NULL::text, NULL::text,
                            NULL::jsonb, retry_at, greatest(extract(epoch FROM retry_at - now())::float8, 0),
                            NULL::smallint, NULL::text, NULL::text;
    END IF;
END
$fn$;
